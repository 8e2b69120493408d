"""Checkpoints across the device boundary, without a GPU: the `meta` device stands in for `cuda`.

Compared: what `restore` hands to `set_rng_state` (every RNG tensor a CPU byte tensor) and where it leaves the
model and optimizer tensors (on the parameters' device) when the model lives on another device than the
file was written from; the states it restores with the ones saved (Python, NumPy, torch). The control loads
the same file the way the trainer did before (map_location = the training device) and shows that
`set_rng_state` refuses it, which is how every resume on CUDA failed.
"""

import random

import numpy as np
import pytest
import torch

from zbpscale.run.config import ModelConfig, TrainConfig
from zbpscale.run.folder import RunFolder
from zbpscale.train import checkpoint
from zbpscale.train.loop import build_optimizer
from zbpscale.train.model import Transformer

SMALL = ModelConfig(n_layer=1, n_head=2, d_model=16, max_seq_len=8, vocab_size=64)


def _trained_checkpoint(run_dir):
    """One AdamW step of a CPU model, then a checkpoint; returns the RNG draws that follow the save."""
    cfg = TrainConfig(model=SMALL, data_dir="x", steps=1, device="cpu")
    model = Transformer(SMALL)
    optimizer = build_optimizer(model, cfg)
    model(torch.zeros(1, 8, dtype=torch.long), torch.zeros(1, 8, dtype=torch.long))[1].backward()
    optimizer.step()
    random.seed(5), np.random.seed(5), torch.manual_seed(5)
    checkpoint.save(run_dir, 1, {"model": model.state_dict(), "optimizer": optimizer.state_dict()}, keep=2)
    return random.random(), np.random.rand(), torch.rand(()).item(), model


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors(v)


@pytest.mark.filterwarnings("ignore:.*meta parameter")  # loading into meta tensors copies nothing, by design
def test_restore_onto_another_device_keeps_rng_states_on_the_cpu(tmp_path, monkeypatch):
    draws, trained = _trained_checkpoint(tmp_path)[:3], _trained_checkpoint(tmp_path / "again")[3]
    handed = []
    real = checkpoint.set_rng_state
    monkeypatch.setattr(checkpoint, "set_rng_state", lambda state: (handed.append(state), real(state)))

    model = Transformer(SMALL).to("meta")  # stands in for a model on cuda
    optimizer = build_optimizer(model, TrainConfig(model=SMALL, data_dir="x", steps=1, device="cpu"))
    random.seed(0), np.random.seed(0), torch.manual_seed(0)
    assert checkpoint.restore(tmp_path, model, optimizer).step == 1

    rng_tensors = list(_tensors(handed[0]))
    assert len(rng_tensors) >= 2 and {t.device.type for t in rng_tensors} == {"cpu"}
    assert handed[0]["torch"].dtype == torch.uint8
    assert (random.random(), np.random.rand(), torch.rand(()).item()) == draws  # the saved streams go on
    moments = [s[k] for s in optimizer.state.values() for k in ("exp_avg", "exp_avg_sq")]
    assert moments and {t.device.type for t in moments} == {"meta"}, "optimizer state follows its parameters"
    assert {p.device.type for p in model.parameters()} == {"meta"}

    cpu_model = Transformer(SMALL)
    checkpoint.restore(tmp_path / "again", cpu_model, build_optimizer(cpu_model, TrainConfig(
        model=SMALL, data_dir="x", steps=1, device="cpu")))
    for (name, a), b in zip(cpu_model.state_dict().items(), trained.state_dict().values()):
        assert torch.equal(a, b), name


def test_a_restored_cpu_run_keeps_no_map_of_its_checkpoint_file(tmp_path):
    """The file is loaded memory-mapped; on the CPU the optimizer kept the loaded moments themselves, so the file
    stayed mapped for the whole attempt and its disk space held after the next saves removed it (a resumed run
    needed room for one checkpoint more than a fresh one). The moments restored are the saved ones, bit for bit."""
    import gc

    _, _, _, trained = _trained_checkpoint(tmp_path)
    saved = torch.load(RunFolder(tmp_path).checkpoint(1), map_location="cpu", weights_only=True)["optimizer"]
    model = Transformer(SMALL)
    optimizer = build_optimizer(model, TrainConfig(model=SMALL, data_dir="x", steps=1, device="cpu"))
    checkpoint.restore(tmp_path, model, optimizer)
    gc.collect()
    with open("/proc/self/maps") as maps:
        mapped = [line for line in maps if "ckpt_" in line]
    assert mapped == [], mapped
    for got, want in zip(optimizer.state_dict()["state"].values(), saved["state"].values()):
        assert all(torch.equal(got[k], want[k]) for k in ("exp_avg", "exp_avg_sq")), "moments differ"


def test_control_rng_states_mapped_to_the_training_device_are_refused(tmp_path):
    _trained_checkpoint(tmp_path)
    (_, path), = RunFolder(tmp_path).list_checkpoints()
    state = torch.load(path, map_location="meta", weights_only=True)  # the old load path, device = meta
    with pytest.raises(ValueError, match="must be loaded onto the CPU"):
        checkpoint.set_rng_state(state["rng"])


def test_rng_states_are_cpu_byte_tensors_when_saved(tmp_path):
    _trained_checkpoint(tmp_path)
    state = checkpoint.load_latest(tmp_path)
    assert state["rng"]["torch"].dtype == torch.uint8 and state["rng"]["torch"].device.type == "cpu"
    assert "cuda" not in state["rng"] or state["rng"]["cuda"].device.type == "cpu"


def test_a_full_disk_leaves_no_temp_file_and_the_previous_checkpoint_intact(tmp_path, monkeypatch):
    """Fault: a checkpoint written on a full disk. The temp file is a link to /dev/full, whose writes fail with
    the kernel's ENOSPC: one CheckpointError line, the temp file gone, the older checkpoint still loads."""
    from zbpscale import files

    _trained_checkpoint(tmp_path)
    tmp = tmp_path / "to-dev-full"  # where the temp file is written (out of reach of save's stale-temp cleanup)
    monkeypatch.setattr(files, "temp_path", lambda path: tmp)
    tmp.symlink_to("/dev/full")
    model = Transformer(SMALL)
    with pytest.raises(checkpoint.CheckpointError) as err:
        checkpoint.save(tmp_path, 2, {"model": model.state_dict()}, keep=2)
    message = str(err.value)
    assert "no space left on device at" in message and "ckpt_00000001.pt, is intact" in message
    assert len(message.splitlines()) == 1 and err.value.__cause__ is None
    assert not tmp.exists() and not tmp.is_symlink()
    assert [s for s, _ in RunFolder(tmp_path).list_checkpoints()] == [1]
    assert checkpoint.load_latest(tmp_path)["step"] == 1


def _paused_writes(monkeypatch):
    """Background writes wait on the returned Event before they begin (the test decides when they land)."""
    import threading

    go, save = threading.Event(), checkpoint.save

    def held(*args, **kw):
        if threading.current_thread().name == "zbpscale-checkpoint":
            assert go.wait(60), "the test never let the write go"
        return save(*args, **kw)

    monkeypatch.setattr(checkpoint, "save", held)
    return go


def test_a_background_checkpoint_is_byte_for_byte_the_synchronous_one_of_its_step(tmp_path, monkeypatch):
    """#54, the trap of pytorch #144657 (an async save that did not copy CPU tensors wrote the next update's
    values): the state of step 1 (model, AdamW moments, a view sharing a parameter's storage, the RNG states) is
    saved synchronously into one folder and in the background into another, whose write is held back while three
    more AdamW steps change every tensor in place and the RNG draws on; once let go, its file equals the synchronous
    one byte for byte. Without the host copy, or with the RNG states read in the writer, it would not."""
    cfg = TrainConfig(model=SMALL, data_dir="x", steps=1, device="cpu")
    model = Transformer(SMALL)
    optimizer = build_optimizer(model, cfg)

    def step():
        model(torch.randint(0, 64, (2, 8)), torch.randint(0, 64, (2, 8)))[1].backward()
        optimizer.step()
        optimizer.zero_grad()

    checkpoint.seed_rngs(3)
    step()
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "numerics": {"threads": 1},
             "view": model.lm_head.weight.detach()[:2]}  # shares the head's storage: written once, as sync does
    go = _paused_writes(monkeypatch)
    writer = checkpoint.Background(tmp_path / "async", keep=2)
    assert writer.start(1, state) is None and writer.in_flight
    checkpoint.save(tmp_path / "sync", 1, state, keep=2)  # the same RNG states: nothing drew between
    for _ in range(3):
        step()
    go.set()
    landed = writer.wait()
    assert landed.step == 1 and landed.error is None and landed.landed_s > 0 and not writer.in_flight
    ((_, sync),), ((_, background),) = (RunFolder(tmp_path / d).list_checkpoints() for d in ("sync", "async"))
    assert sync.read_bytes() == background.read_bytes()
    again = checkpoint.Background(tmp_path / "later", keep=2)  # control: today's state is another file
    again.start(1, {**state, "model": model.state_dict(), "optimizer": optimizer.state_dict()})
    again.wait()
    assert RunFolder(tmp_path / "later").checkpoint(1).read_bytes() != sync.read_bytes()


def test_a_background_writer_reuses_its_host_memory_and_writes_one_at_a_time(tmp_path, monkeypatch):
    """The host copy of the same state lands in the same buffers at the next save; a second save waits for the
    write in flight (returned to the caller) before it copies."""
    model = Transformer(SMALL)
    go = _paused_writes(monkeypatch)
    writer = checkpoint.Background(tmp_path, keep=3)
    keys = [(t.untyped_storage()._cdata, t.untyped_storage().nbytes()) for t in model.state_dict().values()]
    writer.start(1, {"model": model.state_dict()})
    first = [id(writer.copy._kept[key]) for key in keys]
    assert writer.poll() is None  # held back: still in flight
    go.set()
    before = writer.start(2, {"model": model.state_dict()})
    assert before.step == 1 and before.error is None
    assert [id(writer.copy._kept[key]) for key in keys] == first
    assert writer.wait().step == 2 and [s for s, _ in RunFolder(tmp_path).list_checkpoints()] == [1, 2]
