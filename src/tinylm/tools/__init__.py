"""Tools a chat model may call: the built-in calculator and Python, and running a model's calls on them."""

from tinylm.tools.registry import BUILTIN_TOOLS, Tool, check_can_call, get_tools, tool_declarations
from tinylm.tools.run_call import CallResult, run_call

__all__ = ["BUILTIN_TOOLS", "CallResult", "Tool", "check_can_call", "get_tools", "run_call", "tool_declarations"]
