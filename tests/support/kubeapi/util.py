"""Small helpers shared by the server's modules."""


def clone(obj):
    """A deep copy of JSON-like data (much faster than copy.deepcopy)."""
    if isinstance(obj, dict):
        return {k: clone(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [clone(v) for v in obj]
    return obj
