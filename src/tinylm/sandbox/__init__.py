"""The sandbox: untrusted Python (a model's answer, a model's tool call) run in a confined child process.

`run.py` starts the child (scratch directory, resource limits, timeout, no network) and `guard.py`
is the audit hook the child installs before the program runs. The code task's verifier, the RL
code reward and the python tool all run model-written code here and nowhere else. It imports
nothing of tinylm, so anything may use it.
"""

from tinylm.sandbox.run import SandboxResult, network_namespace_prefix, run_python

__all__ = ["SandboxResult", "network_namespace_prefix", "run_python"]
