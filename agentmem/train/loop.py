"""The optimisation both trainers share: AdamW, linear warmup then linear decay, gradient
clipping at 1.0, and a progress line with the running loss every few steps; and the saved
training state that lets a long CPU run stop and resume where it was."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable

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


def signature(**settings: Any) -> str:
    """The settings a resumed run must share with the saved one, as a comparable string."""
    return json.dumps(settings, sort_keys=True, default=str)


def save_state(work: Path, model: torch.nn.Module, optimisation: Optimisation, step: int,
               run_signature: str, train_time: float) -> None:
    """Atomically replace ``work/state.pt`` (a crash while writing keeps the previous one)."""
    work.mkdir(parents=True, exist_ok=True)
    tmp = work / "state.pt.tmp"
    torch.save({"step": step, "signature": run_signature, "train_time_s": train_time,
                "model": model.state_dict(), "optimisation": optimisation.state_dict(),
                "torch_rng": torch.get_rng_state()}, tmp)
    os.replace(tmp, work / "state.pt")


def resume_state(work: Path | None, model: torch.nn.Module, optimisation: Optimisation,
                 run_signature: str, device: str) -> tuple[int, float]:
    """Load ``work/state.pt`` into the model and optimiser: (step reached, seconds trained)."""
    state_file = work / "state.pt" if work is not None else None
    if state_file is None or not state_file.exists():
        raise FileNotFoundError(f"--resume: no saved state at {state_file}")
    state = torch.load(state_file, map_location=device, weights_only=False)
    if state["signature"] != run_signature:
        raise ValueError(f"--resume: settings differ from the saved run\n saved: {state['signature']}"
                         f"\n now:   {run_signature}")
    model.load_state_dict(state["model"])
    optimisation.load_state_dict(state["optimisation"])
    torch.set_rng_state(state["torch_rng"])
    return state["step"], state["train_time_s"]
