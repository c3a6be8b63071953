import torch, kiln, sys, os
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from transformers import GPT2Config, GPT2LMHeadModel
m = GPT2LMHeadModel(GPT2Config(n_layer=1)).eval().to("cuda", torch.bfloat16)
with torch.no_grad():
    r = kiln.explain(m, dynamic=True)(torch.randint(0, 50000, (8, 64), device="cuda"))
text = str(r)
lines = text.splitlines()
i = next(i for i, l in enumerate(lines) if "why code ran eagerly" in l)
print("\n".join(l[:300] for l in lines[i:i + 8]))
