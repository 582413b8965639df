"""The one exception type for invalid calibration inputs."""


class CalibrationError(ValueError):
    """Invalid input to calibration: the message names what was wrong and what is accepted."""
