"""Weights from the trainer's processes to the generators' by RDMA: registered buffers
the generators read (Monarch; a TCP fallback without RDMA NICs)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from zoo.placement.remote import RemoteGenerator, RemoteTrainer


class WeightSlots:
    """A state dict's bytes in flat buffers registered for RDMA reads (Monarch; a TCP
    fallback where there is no RDMA NIC). Two slots: version v is written into one while
    generators may still read v - 1 from the other; RDMAWeightSync waits for every
    generator to have loaded v - 1 before v + 1 overwrites its slot."""

    COUNT = 2
    ALIGN = 64  # bytes: every tensor starts on a cache line

    def __init__(self, state: dict[str, torch.Tensor]) -> None:
        import warnings

        from monarch.rdma import RDMABuffer

        self.layout: list[tuple[str, str, tuple[int, ...], int, int]] = []
        offset = 0
        for name, tensor in state.items():
            size = tensor.numel() * tensor.element_size()
            dtype = str(tensor.dtype).removeprefix("torch.")
            self.layout.append((name, dtype, tuple(tensor.shape), offset, size))
            offset += -(-size // self.ALIGN) * self.ALIGN
        self.flats = [torch.empty(offset, dtype=torch.uint8) for _ in range(self.COUNT)]
        with warnings.catch_warnings():  # the TCP fallback warns once per process
            warnings.simplefilter("ignore")
            self.buffers = [RDMABuffer(flat) for flat in self.flats]

    def write(self, state: dict[str, torch.Tensor], version: int) -> tuple[Any, list, int]:
        flat = self.flats[version % self.COUNT]
        for name, _, _, offset, size in self.layout:
            flat[offset : offset + size].copy_(state[name].contiguous().view(-1).view(torch.uint8))
        return self.buffers[version % self.COUNT], self.layout, version

    @staticmethod
    def views(flat: torch.Tensor, layout: list) -> dict[str, torch.Tensor]:
        """The state dict stored in ``flat`` (views, no copies)."""
        return {
            name: flat[offset : offset + size].view(getattr(torch, dtype)).view(shape)
            for name, dtype, shape, offset, size in layout
        }


class RDMAWeightSync:
    """Weight sync by RDMA: the trainer writes its weights into a registered buffer and
    every generator replica reads them from there; the loop only passes the handle."""

    def __init__(self, trainer: RemoteTrainer, generator: RemoteGenerator) -> None:
        self.trainer = trainer
        self.generator = generator

    def __call__(self) -> None:
        self.generator.settle()  # the slot about to be written is read by now
        buffer, layout, version = self.trainer.export_weights()
        self.generator.pull_weights(buffer, layout, version)
