"""Budget reports: what a ledger has spent, by whom, and what the transcript guarantees (the
values, built from a read-only snapshot of the ledger, rendered as text, Markdown or a page with
a plot of the spending)."""
