"""The SQL front half: one SELECT's text parsed, flattened, joined, type-checked against the
scalar whitelist, hardened into total forms and bound to the policy as a QueryPlan, before any
backend or data is touched."""
