"""torchrun with 2 CPU processes (gloo) equals one process with the same global batch.

Each rank takes batch 2 of the same global draw of 4 rows, DDP averages the gradients, so every step
must match a single process with batch 4 up to float summation order (1e-5). FSDP2 (`--fsdp`) shards
parameters and optimizer state but must compute the same thing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from serve_support import free_port
from test_train_support import cli_args, config, losses, rows
from tinylm.checkpoint import list_checkpoints, load_model, load_train_state
from tinylm.stages.pretrain import pretrain

STEPS = 6


def torchrun(*args: str, nproc: int = 2, nodes: int = 1, timeout: int = 180) -> subprocess.CompletedProcess[str]:
    """`tinylm ARGS` on `nproc` gloo processes: one torchrun (--standalone), or `nodes` torchrun "nodes" on
    127.0.0.1 meeting at one rendezvous endpoint, as separate machines would (--nnodes, --node-rank); then
    node 0's output, with the worst exit status of all."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                               "MASTER_PORT")}
    env["OMP_NUM_THREADS"] = "1"
    launcher = [sys.executable, "-m", "torch.distributed.run"]
    if nodes == 1:
        cmd = [*launcher, "--standalone", f"--nproc_per_node={nproc}", "-m", "tinylm", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    endpoint = f"127.0.0.1:{free_port()}"
    procs = [subprocess.Popen([*launcher, f"--nnodes={nodes}", f"--node-rank={rank}",
                               f"--nproc-per-node={nproc // nodes}", f"--rdzv-endpoint={endpoint}",
                               "-m", "tinylm", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env, start_new_session=True) for rank in range(nodes)]
    try:
        outputs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:  # torchrun and its workers, which would outlive it
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    return subprocess.CompletedProcess(procs[0].args, max(p.returncode for p in procs), *outputs[0])


def single_reference(out: Path, optimizer: str = "muon") -> list[float]:
    pretrain(config(out, batch_size=4, max_steps=STEPS, eval_every=3, optimizer=optimizer))
    return losses(out)


def dev_losses(run: Path) -> list[float]:
    return [r["dev_loss"] for r in rows(run) if "dev_loss" in r]


# one machine with two processes, and two "machines" (torchrun nodes on loopback) with one each; the default
# optimizer (Muon beside AdamW: under FSDP each rank orthogonalises the gathered matrix) and AdamW alone
# ddp-1node is slow-only: the same two DDP processes run in ddp-2nodes (through the multi-node rendezvous) and on
# one node in every post-training stage's torchrun test (tests/test_sft.py, test_dpo.py, test_rl.py)
TOPOLOGIES = [pytest.param("ddp", 1, "muon", id="ddp-1node", marks=pytest.mark.slow),
              pytest.param("ddp", 2, "muon", id="ddp-2nodes"),
              pytest.param("fsdp", 1, "muon", id="fsdp-1node"), pytest.param("fsdp", 1, "adamw", id="fsdp-adamw"),
              pytest.param("fsdp", 2, "muon", id="fsdp-2nodes", marks=pytest.mark.slow)]


@pytest.mark.parametrize(("mode", "nodes", "optimizer"), TOPOLOGIES)
def test_two_processes_equal_one_with_the_same_global_batch(tmp_path: Path, mode: str, nodes: int,
                                                             optimizer: str) -> None:
    reference = single_reference(tmp_path / "single", optimizer)
    extra = ["--fsdp"] if mode == "fsdp" else []
    args = cli_args(tmp_path / mode, "--batch-size", "2", "--max-steps", str(STEPS), "--eval-every", "3",
                    "--optimizer", optimizer, *extra)
    args[args.index("--threads") + 1] = "1"
    result = torchrun(*args, nodes=nodes)
    assert result.returncode == 0, result.stderr[-3000:]
    distributed = losses(tmp_path / mode)
    assert len(distributed) == STEPS  # one writer: rank 0 only
    assert distributed == pytest.approx(reference, abs=1e-5)
    assert dev_losses(tmp_path / mode) == pytest.approx(dev_losses(tmp_path / "single"), abs=1e-5)
    assert "x 2 proc" in result.stderr and result.stdout.count("done: step") == 1
    (ckpt,) = list_checkpoints(tmp_path / mode)
    assert load_train_state(ckpt)["world_size"] == 2
    model, _, _ = load_model(ckpt)  # a full, unsharded checkpoint even under FSDP
    single, _, _ = load_model(tmp_path / "single")
    for (name, a), b in zip(model.state_dict().items(), single.state_dict().values()):
        assert (a - b).abs().max() < 1e-4, name


@pytest.mark.slow
def test_fsdp_resume_is_exact(tmp_path: Path) -> None:
    def train(out: Path, steps: int, *extra: str) -> None:
        args = cli_args(out, "--batch-size", "2", "--max-steps", str(steps), "--schedule-steps", "6", "--fsdp", *extra)
        result = torchrun(*args)
        assert result.returncode == 0, result.stderr[-3000:]

    train(tmp_path / "straight", 6)
    train(tmp_path / "resumed", 3)
    train(tmp_path / "resumed", 6, "--resume", "latest")
    assert losses(tmp_path / "resumed") == losses(tmp_path / "straight")
