"""The precisions a model can be served or trained in, apart from model/device.py so that a config names
them without importing torch."""

from typing import Literal

Precision = Literal["auto", "fp32", "bf16"]
