"""The optimisation both trainers share: AdamW, linear warmup then linear decay, gradient
clipping at 1.0, and a progress line with the running loss every few steps."""

from __future__ import annotations

import time
from typing import Callable

import torch


class Optimisation:
    def __init__(self, model: torch.nn.Module, *, lr: float, steps: int, warmup_divisor: int,
                 log: Callable[[str], None], every: int, started: float | None = None):
        self.model, self.steps, self.log, self.every = model, steps, log, every
        self.started = started if started is not None else time.time()
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
        warmup = max(1, steps // warmup_divisor)
        self.schedule = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            lambda s: min((s + 1) / warmup, max(0.0, (steps - s) / max(1, steps - warmup))))
        self.step_count, self.running = 0, 0.0

    def new_epoch(self) -> None:
        self.running = 0.0

    def step(self, loss: torch.Tensor, epoch: int) -> None:
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.schedule.step()
        self.optimizer.zero_grad()
        self.running += loss.item()
        self.step_count += 1
        if self.step_count % self.every == 0:
            self.log(f"epoch {epoch + 1} step {self.step_count}/{self.steps} loss "
                     f"{self.running / self.every:.4f} ({time.time() - self.started:.0f}s)")
            self.running = 0.0

    def state_dict(self) -> dict:
        """What a resumed run needs: optimiser moments, schedule position, step count."""
        return {"optimizer": self.optimizer.state_dict(), "schedule": self.schedule.state_dict(),
                "step_count": self.step_count, "running": self.running}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])
        self.step_count, self.running = state["step_count"], state["running"]
