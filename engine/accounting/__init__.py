"""The books: the ledger and its running totals, the analysts table, the binding a ledger is
under, the transcript's accountants and the bookkeeper that prices, admits and charges answers."""
