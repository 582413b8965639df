"""The paper's Example 1, measured: Bob's family of 10 shares a contagious disease.

Run it: python examples/bob_family.py
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dpsql import Audit, DependenceModel, calibrate, exact_audit, household_pmf

FAMILY = 10


@dataclass(frozen=True)
class FamilyAudit:
    """One family model, audited with plain DP noise and with calibrated noise."""

    epsilon: float
    model: DependenceModel
    plain: Audit
    calibrated_dp: float
    calibrated_mode: str
    calibrated: Audit
    group_dp: float


def audit_family(epsilon: float, rho: float, p_sick: float) -> FamilyAudit:
    """Audit a COUNT of the sick in a family where each member copies a shared state w.p. rho."""
    marginal = [1.0 - p_sick, p_sick]
    pmf = household_pmf(FAMILY, rho, marginal)
    model = DependenceModel.from_joint_pmf(pmf)
    calibration = calibrate(epsilon, model)
    return FamilyAudit(
        epsilon=epsilon,
        model=model,
        plain=exact_audit(pmf, epsilon),
        calibrated_dp=calibration.epsilon_dp,
        calibrated_mode=calibration.mode,
        calibrated=exact_audit(pmf, calibration.epsilon_dp),
        group_dp=calibrate(epsilon, model, "group").epsilon_dp,
    )


def contagious(epsilon: float = 0.5) -> FamilyAudit:
    """Example 1: the whole family is sick or healthy together (rho = 1), sickness is rare."""
    return audit_family(epsilon, rho=1.0, p_sick=0.001)


def mildly_contagious(epsilon: float = 0.5) -> FamilyAudit:
    """A weaker link: each member shares the family's state only 10% of the time."""
    return audit_family(epsilon, rho=0.1, p_sick=0.05)


def main() -> None:
    """Print both audits with a plain-language reading."""
    bob = contagious()
    eps = bob.epsilon
    print(f"Bob's family: {FAMILY} people, sick together or healthy together (1 in 1000).")
    print(f"The analyst asks how many are sick, {eps}-information-private for each person:")
    print(f"no answer may multiply anyone's belief about Bob by more than e^{eps} = "
          f"{math.exp(eps):.2f}.")
    print(f"Model computed from the joint distribution: k = {bob.model.k}, eta = {bob.model.eta}")
    print()
    print(f"Plain DP noise (eps_dp = {eps}): measured level {bob.plain.level:.3f}, "
          f"{bob.plain.level / eps:.2f} x the promise.")
    print(f"  Answers r {bob.plain.worst_output} multiply the belief that Bob is sick by "
          f"e^{bob.plain.level:.2f} = {math.exp(bob.plain.level):.0f}:")
    print("  the count is about the whole family, so it tells on Bob.")
    print(f"Calibrated noise ({bob.calibrated_mode}, eps_dp = {bob.calibrated_dp:.4f}): "
          f"measured level {bob.calibrated.level:.4f} <= {eps}.")
    print("  With eta = 1 nothing beats group privacy: the noise must hide the whole family.")
    print()
    mild = mildly_contagious()
    print("A milder disease: each member shares the family's state 10% of the time (5% sick).")
    print(f"Model: k = {mild.model.k}, eta = {mild.model.eta:.4f}")
    print(f"Plain DP noise: measured level {mild.plain.level:.3f} > {eps}: still too much.")
    print(f"Calibrated noise ({mild.calibrated_mode}, eps_dp = {mild.calibrated_dp:.4f}): "
          f"measured level {mild.calibrated.level:.4f} <= {eps}.")
    print(f"  Group privacy would use eps_dp = {mild.group_dp:.4f}: "
          f"{mild.calibrated_dp / mild.group_dp:.1f} x the noise for the same guarantee.")


if __name__ == "__main__":
    main()
