"""Rewrites Linear -> ReLU chains of an FX graph into hypatia::fused_linear_relu / hypatia::fused_mlp.

One definition of the patterns and safety rules for both FX front ends: the torch.compile backend
(Dynamo's torch-level graphs: F.linear, F.relu, Tensor.relu_, F.dropout ...) and fuse_exported
(torch.export's ATen graphs: aten.linear, aten.relu, aten.dropout, and the addmm/mm forms of
decomposed 2-D programs). It mirrors the TorchScript passes (passes/linear_chain.cpp): a chain is
Linear -> ReLU (-> Linear -> ReLU ...), eval-mode dropouts between them allowed; a candidate is
left alone, and reported, when an intermediate has another user, when a node between the chain's
nodes may write to memory, when a dropout is in training mode (or its flag is not a constant), or
when the operands' ranks, dtypes, devices or layouts are not the ops' (proven from node metadata).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, List, Optional

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensor
from torch.fx import Graph, GraphModule, Node
from torch.fx.experimental.symbolic_shapes import statically_known_true
from torch.fx.passes.shape_prop import _extract_tensor_metadata
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from . import FusionReport

aten = torch.ops.aten
FUSED_LINEAR_RELU = torch.ops.hypatia.fused_linear_relu.default
FUSED_MLP = torch.ops.hypatia.fused_mlp.default

# Every spelling of ReLU, Linear and dropout that Dynamo (torch level) or torch.export (ATen) writes.
RELU_FUNCTIONS = {torch.relu, torch.relu_, F.relu, torch.Tensor.relu, torch.Tensor.relu_,
                  aten.relu.default, aten.relu_.default}
RELU_METHODS = {"relu", "relu_"}
LINEAR_FUNCTIONS = {F.linear, aten.linear.default}  # F.linear is torch._C._nn.linear
DROPOUT_FUNCTIONS = {F.dropout: "training", torch.dropout: "train", torch.dropout_: "train",
                     aten.dropout.default: "train", aten.dropout_.default: "train"}
# aten ops that are weight.T for a 2-D weight (checked on their arguments in transposed_weight)
TRANSPOSES = {aten.t.default, aten.permute.default, aten.transpose.int}
ADDS = {aten.add.Tensor, aten.add_.Tensor}
SUPPORTED_DTYPES = {torch.float32, torch.float64, torch.bfloat16, torch.float16}
SUPPORTED_DEVICES = {"cpu", "cuda"}
_MISSING = object()


def _arg(node: Node, index: int, name: str, default: Any = _MISSING) -> Any:
    """Argument `name` (position `index`) of a call node, or `default`."""
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def _target_name(node: Node) -> str:
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    if isinstance(node.target, torch._ops.OpOverload):
        return str(node.target)
    return getattr(node.target, "__name__", str(node.target))


def describe(node: Node) -> str:
    return f"{_target_name(node)} -> {node.name}"


def meta_value(node: Any) -> Any:
    """The example value of a node: 'val' (torch.export, AOT) or 'example_value' (Dynamo)."""
    if not isinstance(node, Node):
        return node
    return node.meta.get("val", node.meta.get("example_value"))


def relu_input(node: Node) -> Optional[Node]:
    """The tensor that `node` applies a ReLU to (in place or not), else None."""
    if (node.op == "call_function" and node.target in RELU_FUNCTIONS) or (
            node.op == "call_method" and node.target in RELU_METHODS):
        x = _arg(node, 0, "input", _arg(node, 0, "self", None))
        return x if isinstance(x, Node) else None
    return None


def dropout_of(node: Node) -> Optional[tuple[Node, Optional[bool]]]:
    """(input, train flag) when `node` is a dropout; the flag is None when it is not a constant."""
    if node.op != "call_function" or node.target not in DROPOUT_FUNCTIONS:
        return None
    x = _arg(node, 0, "input", None)
    if not isinstance(x, Node):
        return None
    # F.dropout trains unless told otherwise; the others take the flag as a required argument.
    train = _arg(node, 2, DROPOUT_FUNCTIONS[node.target], True if node.target is F.dropout else None)
    return x, train if isinstance(train, bool) else None


def _is_one(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == 1


@dataclass
class Layer:
    """One linear layer, in whichever spelling the graph uses."""

    input: Node
    weight: Node
    bias: Optional[Node]
    output: Node
    nodes: List[Node]  # the nodes computing `output` from `input`
    transposes: List[Node] = field(default_factory=list)  # weight.T nodes, removed once unused
    problem: str = ""  # why the layer cannot be fused (ranks, dtypes, devices), or ""


@dataclass
class Chain:
    layers: List[Layer]
    relu_last: bool
    nodes: List[Node]  # every node the fused op replaces, in graph order
    output: Node


def _transposed_weight(wt: Any) -> Optional[Node]:
    """w when `wt` is w.T of a 2-D w (aten.t, permute [1, 0], transpose 0/1), else None."""
    if not isinstance(wt, Node) or wt.op != "call_function" or wt.target not in TRANSPOSES:
        return None
    w = wt.args[0]
    val = meta_value(w)
    if not isinstance(w, Node) or not isinstance(val, torch.Tensor) or val.dim() != 2:
        return None
    if wt.target is aten.permute.default and list(wt.args[1]) not in ([1, 0], [-1, -2], [1, -2], [-1, 0]):
        return None
    if wt.target is aten.transpose.int and sorted(d % 2 for d in wt.args[1:3]) != [0, 1]:
        return None
    return w


def _sole_user(node: Node) -> Optional[Node]:
    return next(iter(node.users)) if len(node.users) == 1 else None


def match_layer(first: Node, x: Optional[Node] = None) -> Optional[Layer]:
    """`first` as the first node of a linear layer applied to `x` (any input when x is None):
        linear(x, w, b)                       F.linear, aten.linear
        aten.addmm(b, x, w.T)                 beta = alpha = 1
        aten.mm(x, w.T) [+ aten.add(_, b)]    also aten.matmul
    """
    if first.op != "call_function":
        return None
    if first.target in LINEAR_FUNCTIONS:
        layer = Layer(_arg(first, 0, "input"), _arg(first, 1, "weight"), _arg(first, 2, "bias", None), first, [first])
    elif first.target is aten.addmm.default:
        w = _transposed_weight(first.args[2])
        if w is None or not _is_one(first.kwargs.get("beta", 1)) or not _is_one(first.kwargs.get("alpha", 1)):
            return None
        layer = Layer(first.args[1], w, first.args[0], first, [first], [first.args[2]])
    elif first.target in (aten.mm.default, aten.matmul.default):
        w = _transposed_weight(first.args[1])
        if w is None:
            return None
        layer = Layer(first.args[0], w, None, first, [first], [first.args[1]])
        add = _sole_user(first)
        if (add is not None and add.op == "call_function" and add.target in ADDS and _is_one(add.kwargs.get("alpha", 1))
                and isinstance(add.args[1], Node)):
            if add.args[0] is first and add.args[1] is not first:
                layer.bias, layer.output, layer.nodes = add.args[1], add, [first, add]
            elif add.args[1] is first and add.args[0] is not first and add.target is aten.add.Tensor:
                layer.bias, layer.output, layer.nodes = add.args[0], add, [first, add]
    else:
        return None
    if not isinstance(layer.input, Node) or not isinstance(layer.weight, Node) or (x is not None and layer.input is not x):
        return None
    if layer.bias is not None and not isinstance(layer.bias, Node):
        return None
    layer.problem = _operand_problem(layer)
    return layer


def _operand_problem(layer: Layer) -> str:
    """Why the ops cannot take this layer's operands, from the nodes' example values; '' if they can."""
    x, w, b, out = (meta_value(n) for n in (layer.input, layer.weight, layer.bias, layer.output))
    named = [("input", x), ("weight", w), ("output", out)] + ([("bias", b)] if layer.bias is not None else [])
    for name, val in named:
        if not isinstance(val, torch.Tensor):
            return f"no example value for the {name} (its shape, dtype and device are unknown)"
        if is_traceable_wrapper_subclass(val) or val.layout != torch.strided:
            return f"the {name} is a {type(val).__name__} with layout {val.layout}, not a dense tensor"
        if val.dtype not in SUPPORTED_DTYPES:
            return f"the {name} is {val.dtype}, not one of float32, float64, bfloat16, float16"
        if val.device.type not in SUPPORTED_DEVICES:
            return f"the {name} is on {val.device}, not on the CPU or a CUDA device"
    if x.dim() < 1:
        return "input is 0-D"
    if w.dim() != 2:
        return f"weight is {w.dim()}-D, expected 2-D"
    if b is not None and b.dim() != 1:
        return f"bias is {b.dim()}-D, expected 1-D"
    if b is not None and not statically_known_true(b.shape[0] == w.shape[0]):  # addmm / add broadcast it
        return f"bias has {b.shape[0]} elements for {w.shape[0]} output features"
    if len({val.device for _, val in named}) > 1:
        return "operands on different devices: " + ", ".join(f"{name} {val.device}" for name, val in named)
    # Operands whose dtype is not the output's are autocast's doing (linear itself insists on one
    # dtype): rewrite_chains casts them as autocast does.
    return ""


def _next_op(v: Node, dropouts: List[Node]) -> Optional[Node]:
    """The sole user of `v`, looking through eval-mode dropouts (collected in `dropouts`)."""
    while True:
        user = _sole_user(v)
        if user is None:
            return None
        dropout = dropout_of(user)
        if dropout is None or dropout[0] is not v or dropout[1] is not False:
            return user
        dropouts.append(user)
        v = user


def _why_not_relu(v: Node) -> str:
    """Why the layer output `v` is not fusable with a ReLU that consumes it (possibly through
    dropouts); '' when no ReLU consumes it, i.e. when it is no candidate at all."""
    while True:
        relu = next((u for u in v.users if relu_input(u) is v), None)
        dropout = next((u for u in v.users if (d := dropout_of(u)) is not None and d[0] is v), None)
        following = relu or dropout
        if following is None:
            return ""
        if len(v.users) > 1:
            return f"{v.name} feeding {_target_name(following)} has {len(v.users)} users"
        if relu is not None:
            return ""
        train = dropout_of(dropout)[1]
        if train is None:
            return "dropout before the ReLU has a non-constant training flag"
        if train:
            return "dropout before the ReLU is in training mode"
        v = dropout


def _build_chain(first: Node, mlp: bool) -> tuple[Optional[Chain], str]:
    """Linear -> ReLU (-> Linear -> ReLU ...) starting at `first`, and why a pair starting there was
    refused (pairs only: mlp=False); (None, '') when `first` starts no candidate."""
    head = match_layer(first)
    if head is None:
        return None, ""
    dropouts: List[Node] = []
    relu = _next_op(head.output, dropouts)
    if relu is None or relu_input(relu) is not (dropouts[-1] if dropouts else head.output):
        return None, "" if mlp else _why_not_relu(head.output)
    if head.problem:
        return None, "" if mlp else head.problem
    chain = Chain([head], True, head.nodes + dropouts + [relu], relu)
    while mlp:
        gap: List[Node] = []
        following = _next_op(chain.output, gap)
        if following is None:
            break
        layer = match_layer(following, gap[-1] if gap else chain.output)
        if layer is None or layer.problem or meta_value(layer.output).dtype != meta_value(head.output).dtype:
            break
        chain.layers.append(layer)
        chain.nodes += gap + layer.nodes
        chain.output, chain.relu_last = layer.output, False
        tail: List[Node] = []
        after = _next_op(chain.output, tail)
        if after is None or relu_input(after) is not (tail[-1] if tail else chain.output):
            break
        chain.nodes += tail + [after]
        chain.output, chain.relu_last = after, True
    if mlp and len(chain.layers) < 2:
        return None, ""
    return chain, ""


def may_write(node: Node) -> bool:
    """Whether `node` may write to a tensor it did not create (conservatively: anything in place,
    out=, a module call, a higher-order op)."""
    if node.op == "call_module":
        return True
    if node.op == "call_method":
        return node.target.endswith("_") or node.target in ("copy_", "set_")
    if node.op != "call_function":
        return False
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return target._schema.is_mutable
    if isinstance(target, torch._ops.HigherOrderOperator):
        return True
    if target in (operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv):
        return True
    name = getattr(target, "__name__", "")
    return name.endswith("_") or node.kwargs.get("inplace") is True or "out" in node.kwargs


def _barrier_between(chain: Chain) -> str:
    """Why the chain cannot become one node where its last node is: a node between its first and
    last node that may write to memory (the fused op would read what it wrote) or that changes
    global state, such as grad mode or autocast (the fused op would run under the other state)."""
    own = set(chain.nodes)
    node = chain.nodes[0].next
    while node is not chain.nodes[-1]:
        if node not in own:
            if may_write(node):
                return f"{describe(node)} between the chain's nodes may write to its operands"
            if node.op == "call_function" and node.is_impure():
                return f"{describe(node)} between the chain's nodes changes global state"
        node = node.next
    return ""


def find_chains(graph: Graph, mlp: bool, skipped: List[str]) -> List[Chain]:
    """Chains of two or more layers (mlp) or Linear+ReLU pairs in `graph`, each proven safe to fuse.
    Why a pair candidate was left alone goes to `skipped`."""
    taken: set = set()
    chains = []
    for node in graph.nodes:
        if node in taken:
            continue
        chain, why = _build_chain(node, mlp)
        if chain is not None and any(n in taken for n in chain.nodes):
            chain = None
        if chain is not None and (barrier := _barrier_between(chain)):
            why, chain = barrier, None
        if chain is not None:
            taken.update(chain.nodes)
            chains.append(chain)
        elif why:
            skipped.append(f"{describe(node)}: {why}")
    return chains


class ValueSetter:
    """Gives new nodes the example values their graph's other nodes have (Dynamo: 'example_value',
    torch.export: 'val' and 'tensor_meta'), computed on fake tensors in the graph's fake mode."""

    def __init__(self, graph: Graph):
        self.key = "val" if any("val" in n.meta for n in graph.nodes if n.op != "output") else "example_value"
        # The values' own mode (a backend's tracing context may hold another one).
        self.fake_mode = next((v.fake_mode for n in graph.nodes if isinstance(v := meta_value(n), FakeTensor)), None)

    def __call__(self, node: Node, like: Node) -> None:
        for key in ("stack_trace", "nn_module_stack"):
            if key in like.meta:
                node.meta[key] = like.meta[key]
        if self.fake_mode is None:
            return
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), meta_value)
        with self.fake_mode:
            value = node.target(*args, **kwargs)
        node.meta[self.key] = value
        if self.key == "val":
            node.meta["tensor_meta"] = _extract_tensor_metadata(value)


def rewrite_chains(graph: Graph, chains: List[Chain], set_value: ValueSetter) -> List[str]:
    """Replaces each chain by one fused node; returns a line per fused node. Chains must come from
    one find_chains call on the graph as it is."""
    done = []
    replaced = {}  # a chain may read the output of one rewritten before it (pairs in a row)
    for chain in chains:
        last = chain.nodes[-1]
        dtype = meta_value(chain.output).dtype
        with graph.inserting_before(last):
            def operand(n: Optional[Node]) -> Optional[Node]:
                n = replaced.get(n, n)
                if n is None or meta_value(n).dtype == dtype:
                    return n
                cast = graph.call_function(aten._to_copy.default, (n,), {"dtype": dtype})  # autocast's cast
                set_value(cast, last)
                return cast

            x = operand(chain.layers[0].input)
            weights = [operand(layer.weight) for layer in chain.layers]
            biases = [operand(layer.bias) for layer in chain.layers]
            if len(chain.layers) == 1:
                fused = graph.call_function(FUSED_LINEAR_RELU, (x, weights[0], biases[0]))
            else:
                fused = graph.call_function(FUSED_MLP, (x, weights, biases, chain.relu_last))
        set_value(fused, last)
        chain.output.replace_all_uses_with(fused)
        replaced[chain.output] = fused
        for node in reversed(chain.nodes):
            graph.erase_node(node)
        for t in {t for layer in chain.layers for t in layer.transposes}:
            if not t.users:
                graph.erase_node(t)
        done.append(f"{_target_name(fused)} -> {fused.name}: {len(chain.layers)} layer(s) from "
                    + ", ".join(n.name for n in chain.nodes))
    return done


def fuse_graph_module(gm: GraphModule, mlp: bool = True) -> FusionReport:
    """Fuses `gm` in place (chains first, then the remaining pairs) and recompiles it."""
    report = FusionReport()
    set_value = ValueSetter(gm.graph)
    if mlp:
        chains = find_chains(gm.graph, True, report.skipped)
        report.fused += rewrite_chains(gm.graph, chains, set_value)
        report.mlp += len(chains)
        report.mlp_layers += sum(len(c.layers) for c in chains)
    pairs = find_chains(gm.graph, False, report.skipped)
    report.fused += rewrite_chains(gm.graph, pairs, set_value)
    report.linear_relu += len(pairs)
    if report.fused:
        gm.graph.lint()
        gm.recompile()
    return report
