"""numerics.adopt against the fingerprint it is given: a resumed CPU attempt takes the checkpoint's thread count
(torch's own setting afterwards is the check) and names every difference it cannot undo; nothing to adopt
from a checkpoint without a fingerprint. The whole-run check is in test_train (a run started at 2 threads and
resumed by a process given 1 equals the straight run bit for bit)."""

import pytest
import torch

from zbpscale.train import numerics

CPU = torch.device("cpu")


@pytest.fixture
def threads():
    before = torch.get_num_threads()
    yield before
    torch.set_num_threads(before)


def test_a_checkpoint_without_a_fingerprint_changes_nothing(threads):
    assert numerics.adopt(None, CPU) == ([], [])
    assert torch.get_num_threads() == threads


def test_the_same_machine_and_threads_keep_everything(threads):
    assert numerics.adopt(numerics.fingerprint(CPU), CPU) == ([], [])
    assert torch.get_num_threads() == threads


def test_a_resumed_cpu_attempt_takes_the_checkpoints_thread_count(threads):
    saved = {**numerics.fingerprint(CPU), "threads": threads + 1}
    kept, differs = numerics.adopt(saved, CPU)
    assert torch.get_num_threads() == threads + 1
    assert kept == [f"{threads + 1} CPU threads as before (this attempt was given {threads})"] and differs == []
    assert numerics.fingerprint(CPU)["threads"] == threads + 1  # what the attempt's start record will say


def test_what_cannot_be_undone_is_named(threads):
    saved = {**numerics.fingerprint(CPU), "cpu": "Some Other CPU", "cpu_capability": "NO_SUCH_ISA", "torch": "2.4.0"}
    kept, differs = numerics.adopt(saved, CPU)
    now = numerics.fingerprint(CPU)
    assert kept == []
    assert differs == [f"torch 2.4.0 -> {now['torch']}", f"cpu Some Other CPU -> {now['cpu']}",
                       f"cpu_capability NO_SUCH_ISA -> {now['cpu_capability']}"]
