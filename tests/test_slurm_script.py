"""scripts/slurm/train.sbatch, run under a stand-in for Slurm: `srun` starts its command once per "node" on
this machine with that node's SLURM_NODEID, `scontrol` names 127.0.0.1 as the head. The two torchrun
nodes meet and train, with the losses of one process on the same global batch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from serve_support import free_port
from test_ddp import STEPS, single_reference
from test_train_support import cli_args, losses

SCRIPT = Path(__file__).parents[1] / "scripts" / "slurm" / "train.sbatch"
FAKE_SRUN = """#!/bin/bash
# srun's job here: run the command once per node, each with its SLURM_NODEID, and fail if any fails
while [[ "$1" == --* ]]; do shift; done
pids=()
for ((node = 0; node < SLURM_NNODES; node++)); do SLURM_NODEID=$node "$@" & pids+=($!); done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
exit $status
"""


@pytest.mark.slow
def test_the_slurm_script_starts_one_torchrun_per_node_and_they_train_as_one(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(FAKE_SRUN)
    (bin_dir / "scontrol").write_text("#!/bin/bash\necho 127.0.0.1\n")
    (bin_dir / "torchrun").write_text(f'#!/bin/bash\nexec {sys.executable} -m torch.distributed.run "$@"\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                               "MASTER_PORT")}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", SLURM_NNODES="2", SLURM_JOB_NODELIST="node[0-1]", OMP_NUM_THREADS="1",
               GPUS_PER_NODE="1", TINYLM_RDZV_PORT=str(free_port()))
    args = cli_args(tmp_path / "run", "--batch-size", "2", "--max-steps", str(STEPS), "--eval-every", "3")
    result = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert losses(tmp_path / "run") == pytest.approx(single_reference(tmp_path / "single"), abs=1e-5)
    assert "x 2 proc" in result.stderr
