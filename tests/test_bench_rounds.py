"""bench/rounds.py: arms alternate so none always runs first, and figures are medians with their range."""

from bench.rounds import alternate, machine, ratio_spread, spread


def test_each_round_rotates_which_arm_runs_first():
    order = []
    runs = alternate({name: (lambda i, name=name: order.append((i, name)) or {"round": i}) for name in "abc"}, 4)
    assert order == [(0, "a"), (0, "b"), (0, "c"), (1, "b"), (1, "c"), (1, "a"),
                     (2, "c"), (2, "a"), (2, "b"), (3, "a"), (3, "b"), (3, "c")]
    assert [run["round"] for run in runs["b"]] == [0, 1, 2, 3]


def test_the_figure_is_the_median_with_its_range_never_the_best():
    assert spread([3.0, 1.0, 10.0]) == {"median": 3.0, "min": 1.0, "max": 10.0, "rounds": 3}
    assert ratio_spread([2.0, 3.0, 4.0], [1.0, 3.0, 8.0]) == {"median": 1.0, "min": 0.5, "max": 2.0, "rounds": 3}
    assert len(machine()["load_average"]) == 3 and "torch" in machine()["versions"]
