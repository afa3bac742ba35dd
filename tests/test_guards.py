import torch

from harness.verdict.guards import aliased_input, poison_free_memory
from harness.run.pipeline import make_seeds


def test_alias_detection():
    a, b = torch.rand(10), torch.rand(10)
    assert aliased_input(a[2:5], [b, a]) == 1
    assert aliased_input(a.clone(), [a, b]) is None
    assert aliased_input("not a tensor", [a]) is None


def test_poison_is_a_no_op_on_cpu():
    assert poison_free_memory("cpu", 1 << 20) == 0


def test_seeds_mix_the_secret_but_keep_the_init_seed():
    one = make_seeds(0, 11, [{"batch_size": 1}], trials=3, extra_trials=2)
    two = make_seeds(0, 12, [{"batch_size": 1}], trials=3, extra_trials=2)
    assert one["init"] == two["init"]                       # matched construction is reproducible
    assert one["shapes"][0]["trials"] != two["shapes"][0]["trials"]  # inputs depend on the secret
    assert one == make_seeds(0, 11, [{"batch_size": 1}], trials=3, extra_trials=2)  # replayable
    assert [len(s["trials"]) for s in one["shapes"]] == [3, 2] and one["shapes"][1]["overrides"] == {"batch_size": 1}
    assert len(set(one["shapes"][0]["trials"] + one["shapes"][1]["trials"] + one["timing"])) == 7
