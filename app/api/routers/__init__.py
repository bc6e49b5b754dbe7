"""One router per resource; each router has one tag, which prefixes its operationIds."""
