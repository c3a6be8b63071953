"""``refuse(why)``: called from code kiln traces (capture/polyfills.py), it breaks the graph at the user's
call with ``why`` as the reason (values/stdlib.py answers the call; this file is not traced)."""


def refuse(why: str) -> None:
    raise AssertionError(f"kiln.capture.refuse ran outside tracing: {why}")
