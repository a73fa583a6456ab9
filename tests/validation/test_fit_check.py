"""A published run ran, so its peak memory fit: ``dtsim validate`` lists the runs simulated above their
GPU's usable memory (memory-model overestimates), with their known cause."""

from __future__ import annotations

from simulator.validation.fit_check import cause_of, overestimates


def test_overestimates_are_the_rows_above_the_usable_memory_largest_first():
    rows = [{"id": "a", "error": 0.0, "memory_of_usable": 0.99, "allocated_of_usable": 0.90},
            {"id": "llmfoundry-mpt30b-h100-8gpu-seq2048", "error": 0.1, "memory_of_usable": 1.05,
             "allocated_of_usable": 0.955},
            {"id": "b", "error": 0.0, "memory_of_usable": 1.5, "allocated_of_usable": 1.36},
            {"id": "c", "skipped": "not expressible"}]
    over = overestimates(rows)
    assert [o["id"] for o in over] == ["b", "llmfoundry-mpt30b-h100-8gpu-seq2048"]
    assert over[0]["cause"] == "no named cause" and "fragmentation" in over[1]["cause"]
    # 1.05 with the 10% fragmentation allowance is 0.955 allocated: it fits, tightly; 1.36 allocated does not
    assert [o["verdict"] for o in over] == ["does not fit", "fits tightly"]


def test_offloading_presets_are_named():
    assert "cpu_offloading_num_layers" in cause_of("mbridge2511-gb200-llama3-70b-64gpu-fp8cs")
    assert cause_of("vtrain-single-x") == "no named cause"
