"""Calibration: dependence model (k, eta), guarantee maps, composition and the exact audit."""
