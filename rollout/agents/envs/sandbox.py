"""The calc environment's tool: an arithmetic expression evaluated in a locked-down child process.

The child gets a CPU-time limit, an address-space limit and no network (sockets are disabled before
anything is evaluated), and evaluates only integer arithmetic: the expression is parsed and walked
node by node, never handed to eval(). A wall-clock timeout stops a child that sleeps or hangs.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

# Runs in the child: `python -I -S -c CHILD LIMITS` with the expression on stdin.
CHILD = r'''
import ast, operator, resource, socket, sys
cpu_s, memory_bytes = int(sys.argv[1]), int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
def no_network(*args, **kwargs):
    raise PermissionError("network access is disabled in the calculator")
socket.socket = socket.create_connection = socket.socketpair = no_network
BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
          ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
def value(node):
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in BINARY:
        left, right = value(node.left), value(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise ValueError("exponent too large")
        if isinstance(node.op, ast.Pow) and right < 0:
            raise ValueError("a negative exponent gives a fraction: integers only")
        return BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in UNARY:
        return UNARY[type(node.op)](value(node.operand))
    raise ValueError("only integers and + - * // % ** are allowed")
try:
    print(value(ast.parse(sys.stdin.read(), mode="eval").body))
except ZeroDivisionError:
    print("Error: division by zero.")
except (ValueError, SyntaxError, RecursionError) as error:
    print(f"Error: {error}.")
'''


@dataclass(frozen=True)
class SandboxLimits:
    cpu_s: int = 1
    memory_mb: int = 256
    wall_timeout_s: float = 3.0
    max_expression_chars: int = 200


def calculate(expression: str, limits: SandboxLimits = SandboxLimits()) -> str:
    """The expression's value as text, or an error message the model can read and recover from."""
    if len(expression) > limits.max_expression_chars:
        return f"Error: the expression is longer than {limits.max_expression_chars} characters."
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-c", CHILD, str(limits.cpu_s), str(limits.memory_mb * 2**20)],
            input=expression, capture_output=True, text=True, timeout=limits.wall_timeout_s,
        )
    except subprocess.TimeoutExpired:
        return "Error: the calculation took too long."
    if done.returncode != 0:  # killed by a limit (SIGXCPU, MemoryError) or crashed
        return "Error: the calculation exceeded its limits."
    return done.stdout.strip()
