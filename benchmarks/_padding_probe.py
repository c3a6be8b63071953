import torch, kiln, sys, os
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import kiln.lower.gemm_padding as G
orig = G.pad_misaligned_matmuls
def probe(graph, mode="auto"):
    print("PROBE ops", sorted({str(n.target) for n in graph.nodes if n.op == "call_function" and any(k in str(n.target) for k in ("mm", "matmul", "linear"))}))
    for node in graph.nodes:
        if node.op == "call_function" and node.target in (torch.ops.aten.mm.default, torch.ops.aten.bmm.default):
            a, b, out = (G._val(x) for x in (*node.args[:2], node))
            if a is None or b is None or out is None:
                print("PROBE no val", node); continue
            pads = G.padding_for(a, b)
            print("PROBE", type(a).__name__, tuple(a.shape), tuple(b.shape), a.dtype, b.dtype, getattr(out, "fake_device", out.device), pads,
                  G.worth_padding(a, b, pads) if pads else None)
    return orig(graph, mode)
import kiln.lower.graph as LG
LG.pad_misaligned_matmuls = probe
from transformers import GPT2Config, GPT2LMHeadModel
m = GPT2LMHeadModel(GPT2Config(n_layer=1)).eval().to("cuda", torch.bfloat16)
c = kiln.compile(m, dynamic=True)
with torch.no_grad():
    c(torch.randint(0, 50000, (8, 64), device="cuda"))
print(dict(kiln.stats.dynamic_fallbacks))
