"""The release step: noise drawn on a query's exact values, post-processed into the answer an
analyst sees with its half-widths. It runs inside the charge's transaction; a failure here
(`PostProcessingFailed`) rolls the charge back and halts the engine."""

from __future__ import annotations

from . import postprocess
from .answer_table import Table
from .noise import Mechanism, release_cells
from .plan import ExactAnswer, QueryPlan

Answer = tuple[Table, Table, Table]
"""The answer, its per-cell 95% half-widths and its simultaneous ones."""


class PostProcessingFailed(Exception):
    """Post-processing failed on noisy values inside the charge: the charge rolls back and the
    database halts (internal; never shown)."""


def release_answer(post: postprocess.Post, plan: QueryPlan, post_sql: str,
                   exact: ExactAnswer, mechanisms: dict[str, Mechanism]) -> Answer:
    """Fresh noise on every measured cell of one query, and the answer built from the noisy
    values: directly when its outputs allow, else by the post-processing query on the noisy
    frame."""
    noisy = {cell: values for mech in mechanisms.values()
             for cell, values in release_cells(mech, exact.values).items()}
    finished = postprocess.direct(plan, exact.keys, noisy, mechanisms)
    if finished is None:
        frame = postprocess.noisy_frame(plan, exact.keys, noisy, mechanisms)
        finished = postprocess.finish(post, plan, post_sql, frame)
    return finished
