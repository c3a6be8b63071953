"""kiln under torch.distributed: graphs split at DDP bucket boundaries (ddp_split, ddp_backend).
See docs/distributed.md."""
