"""zbpscale: zeroth-order backpropagation (ZBP) against backpropagation across a ladder of model sizes."""

__version__ = "0.1.0"
