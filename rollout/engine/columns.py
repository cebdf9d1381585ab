"""Per-row tensors of a decoding batch that grow a column at a time (a cache the engine keeps beside transformers'):
buffers with room to spare, so that appending a column does not copy everything before it."""

from __future__ import annotations

import torch


class Columns:
    """Named tensors [B, C, ...] sharing their rows and column capacity C. `write(start, name=value, ...)` puts
    values [B, S, ...] at columns [start, start + S) (doubling the room when they pass it: a batch's buffers are copied
    a logarithmic number of times); `select(rows)` keeps those rows, as a row that ends leaves the batch."""

    def __init__(self, capacity: int, **like: torch.Tensor):
        # Boolean columns (which positions are real) start False: a column never written is never a key.
        self.buffers = {name: (torch.zeros if value.dtype == torch.bool else torch.empty)(
            value.shape[0], capacity, *value.shape[2:], dtype=value.dtype, device=value.device)
            for name, value in like.items()}

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.buffers[name]

    @property
    def capacity(self) -> int:
        return next(iter(self.buffers.values())).shape[1]

    def write(self, start: int, **values: torch.Tensor) -> None:
        end = start + next(iter(values.values())).shape[1]
        if end > self.capacity:
            grown = Columns(max(end, 2 * self.capacity), **self.buffers)
            for name, buffer in self.buffers.items():
                grown.buffers[name][:, :start] = buffer[:, :start]
            self.buffers = grown.buffers
        for name, value in values.items():
            self.buffers[name][:, start:end] = value

    def select(self, rows: torch.Tensor) -> None:
        self.buffers = {name: buffer[rows] for name, buffer in self.buffers.items()}
