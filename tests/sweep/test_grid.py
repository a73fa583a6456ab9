from __future__ import annotations

import pytest

from simulator.errors import InputError
from simulator.sweep.analysis import best, pareto_front
from simulator.sweep.grid import parse_grid, parse_range, points, valid_paths


def test_log_and_linear_ranges():
    assert parse_range("1e6:1e9:log:4") == [1e6, 1e7, 1e8, 1e9]
    assert parse_range("1:3:lin:5") == [1.0, 1.5, 2.0, 2.5, 3.0]
    assert len(parse_range("1e6:1e9:log:12")) == 12


def test_grid_product_order_and_count():
    grid = parse_grid(["parallel.zero_stage=0,1,2,3", "parallel.reduce_bucket_size=1e7,5e7,2e8,5e8",
                       "cluster.nodes=1,2,4"])
    pts = points(grid)
    assert len(pts) == 4 * 4 * 3
    assert pts[0] == {"parallel.zero_stage": 0, "parallel.reduce_bucket_size": 1e7, "cluster.nodes": 1}
    assert pts[1]["cluster.nodes"] == 2  # the last key varies fastest


def test_file_grid_merged_with_options():
    grid = parse_grid(["parallel.zero_stage=3"], {"parallel.zero_stage": [1, 2], "cluster.nodes": "1:4:lin:4"})
    assert grid == {"parallel.zero_stage": [3], "cluster.nodes": [1.0, 2.0, 3.0, 4.0]}


def test_bad_grids():
    with pytest.raises(InputError, match="valid paths: .*parallel.zero_stage"):
        parse_grid(["parallel.zero_stag=1,2"])
    with pytest.raises(InputError, match="empty"):
        parse_grid([])
    with pytest.raises(InputError, match="start:stop"):
        parse_grid(["parallel.reduce_bucket_size=1e6:1e9:cubic:3"])
    with pytest.raises(InputError, match="positive"):
        parse_range("0:1e9:log:3")
    assert "model.n_layers" in valid_paths() and "cluster.topology" in valid_paths()
    # a doubled comma and a repeated value are typos, not a smaller or duplicated grid (bug bash)
    with pytest.raises(InputError, match="empty value"):
        parse_grid(["parallel.zero_stage=1,,2"])
    with pytest.raises(InputError, match="bf16 more than once"):
        parse_grid(["training.precision=bf16,bf16"])
    assert parse_grid(["parallel.zero_stage=1,2,"])["parallel.zero_stage"] == [1, 2]  # trailing comma


def test_best_and_pareto_by_hand():
    rows = [
        {"point": 0, "status": "ok", "step_time_s": 2.0, "wall_clock_s": 10.0, "cost_usd": 100.0},
        {"point": 1, "status": "ok", "step_time_s": 1.0, "wall_clock_s": 5.0, "cost_usd": 300.0},
        {"point": 2, "status": "ok", "step_time_s": 1.5, "wall_clock_s": 7.0, "cost_usd": 350.0},  # dominated by 1
        {"point": 3, "status": "infeasible", "step_time_s": 0.1, "wall_clock_s": 1.0, "cost_usd": 1.0},
        {"point": 4, "status": "ok", "step_time_s": 3.0, "wall_clock_s": 20.0, "cost_usd": 50.0},
    ]
    assert best(rows, "step_time")["point"] == 1  # the infeasible point never wins
    assert best(rows, "cost")["point"] == 4
    assert [r["point"] for r in pareto_front(rows)] == [1, 0, 4]
