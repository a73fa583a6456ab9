from simulator.engine.intervals import exposed, measure, subtract, union


def test_union_merges_and_sorts():
    assert union([(3, 4), (0, 1), (0.5, 2), (2, 2)]) == [(0, 2), (3, 4)]


def test_subtract():
    assert subtract([(0, 10)], [(1, 2), (5, 7)]) == [(0, 1), (2, 5), (7, 10)]
    assert subtract([(0, 1), (3, 4)], [(0, 4)]) == []
    assert subtract([(0, 5)], []) == [(0, 5)]


def test_measure_and_exposed():
    assert measure([(0, 2), (1, 3)]) == 3
    assert exposed([(0, 10), (12, 14)], [(2, 4), (13, 20)]) == 8 + 1
