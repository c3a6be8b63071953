"""Capture: the PEP 523 frame hook, bytecode decoding/assembly, and the symbolic bytecode interpreter
that turns a Python frame into a torch.fx graph, guards, and transformed bytecode."""
