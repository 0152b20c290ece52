"""``StepSchedule``: a learning-rate schedule stepped after every optimizer step, over the run's step count."""

from __future__ import annotations

import functools
import math
from typing import Any

import hydra
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from glmrag.models.retriever_module import Evaluation, RetrieverModule, Scores, StepSchedule, warmup_cosine


class Regression(RetrieverModule):
    """A one-weight RetrieverModule trained on constant batches; it records the learning rate of every step."""

    def __init__(self, scheduler: Any, lr: float = 1e-2) -> None:
        super().__init__()
        self.init_evaluation(Evaluation(ks=(1, 2)))
        self.weight = nn.Parameter(torch.ones(1))
        self.optimizer_factory = functools.partial(torch.optim.AdamW, lr=lr)
        self.scheduler_factory = scheduler
        self.lrs: list[float] = []

    def model_step(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        return (self.weight * batch["x"]).pow(2).mean(), batch["x"]

    def score(self, batch: dict[str, Any], logits: torch.Tensor | None = None) -> list[Scores]:
        return []

    def question_batch(self, questions: Any, kg: str, question_emb: Any) -> dict[str, Any]:
        raise NotImplementedError

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self.lrs.append(self.optimizers().param_groups[0]["lr"])


def batches(n: int) -> DataLoader:
    return DataLoader([{"x": torch.ones(2), "real": torch.tensor([True])} for _ in range(n)], batch_size=None)


def fit(module: Regression, cpu_trainer, tmp_path, epochs: int, steps: int, accumulate: int = 1) -> Regression:
    trainer = cpu_trainer(
        max_epochs=epochs, limit_val_batches=0, accumulate_grad_batches=accumulate, default_root_dir=tmp_path
    )
    trainer.fit(module, train_dataloaders=batches(steps))
    return module


def one_cycle(max_lr: float, pct_start: float = 0.3) -> StepSchedule:
    return StepSchedule(
        functools.partial(
            torch.optim.lr_scheduler.OneCycleLR,
            max_lr=max_lr,
            pct_start=pct_start,
            anneal_strategy="linear",
            div_factor=10.0,
            final_div_factor=1.0,
            cycle_momentum=False,
        )
    )


def test_step_schedule_changes_the_rate_every_step_over_the_whole_run(cpu_trainer, tmp_path):
    # 2 epochs of 5 steps: 10 steps, warm-up over the first 3 (pct_start 0.3: up to step 0.3 * 10 - 1 = 2).
    module = fit(Regression(one_cycle(max_lr=1.0)), cpu_trainer, tmp_path, epochs=2, steps=5)
    # OneCycleLR with linear annealing, written out: 0.1 -> 1.0 over steps 0..2, then 1.0 -> 0.1 over steps 2..9
    expected = [0.1 + 0.9 * s / 2 for s in range(3)] + [1.0 - 0.9 * (s - 2) / 7 for s in range(3, 10)]
    assert module.lrs == pytest.approx(expected)
    assert len(set(module.lrs[:5])) == 5  # it moves within the first epoch, not once an epoch


def test_total_steps_follow_epochs_and_accumulation(cpu_trainer, tmp_path):
    # OneCycleLR raises if stepped past total_steps, so the runs below would fail with a wrong count.
    three = fit(Regression(one_cycle(max_lr=1.0)), cpu_trainer, tmp_path / "a", epochs=3, steps=4)
    assert len(three.lrs) == 12 and three.lrs[-1] == pytest.approx(1.0 - 0.9 * (11 - 3) / 8)
    scheduler = three.trainer.lr_scheduler_configs[0]
    assert scheduler.interval == "step" and scheduler.scheduler.total_steps == 12
    accumulated = fit(Regression(one_cycle(max_lr=1.0)), cpu_trainer, tmp_path / "b", epochs=2, steps=6, accumulate=2)
    assert accumulated.trainer.lr_scheduler_configs[0].scheduler.total_steps == 6  # optimizer steps, not batches


def test_a_plain_scheduler_still_steps_once_an_epoch_on_val_loss(cpu_trainer, tmp_path):
    halve = functools.partial(torch.optim.lr_scheduler.StepLR, step_size=1, gamma=0.5)
    config = Regression(halve).configure_optimizers()["lr_scheduler"]
    assert (config["interval"], config["monitor"]) == ("epoch", "val/loss")
    module = fit(Regression(halve, lr=1.0), cpu_trainer, tmp_path, epochs=2, steps=3)
    assert module.lrs == [1.0, 1.0, 1.0, 0.5, 0.5, 0.5]


def test_a_fit_without_optimizer_steps_is_a_named_error(cpu_trainer, tmp_path):
    trainer = cpu_trainer(max_epochs=1, limit_train_batches=0, limit_val_batches=0, default_root_dir=tmp_path)
    with pytest.raises(ValueError, match="model.scheduler is a StepSchedule"):
        trainer.fit(Regression(one_cycle(max_lr=1.0)), train_dataloaders=batches(3))


def test_schedule_must_be_callable():
    with pytest.raises(TypeError, match="_partial_: true"):
        StepSchedule(torch.optim.lr_scheduler.OneCycleLR.__name__)


def test_demo_config_warms_up_to_its_learning_rate_per_step(train_config):
    model = train_config(["experiment=demo"]).model
    schedule = hydra.utils.instantiate(model.scheduler)
    assert isinstance(schedule, StepSchedule)
    optimizer = hydra.utils.instantiate(model.optimizer)(params=[nn.Parameter(torch.zeros(1))])
    scheduler = schedule.schedule(optimizer=optimizer, total_steps=75)  # 5 epochs of 15 batches
    rates = []
    for _ in range(75):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    peak = max(rates)
    assert peak == pytest.approx(model.optimizer.lr, rel=1e-3)  # optimizer.lr is the schedule's peak
    assert rates[0] < peak / 5 and rates[-1] < peak / 5  # warms up from a small rate and anneals to one
    assert rates.index(peak) == math.ceil(0.1 * 75 - 1)  # the first step after the 10% warm-up (OneCycleLR's end)
    assert optimizer.param_groups[0]["betas"] == (0.9, 0.999)  # AdamW's betas are left alone (no momentum cycle)
    assert not math.isnan(sum(rates))


def test_warmup_cosine_gives_one_cycle_rates():
    # torch's OneCycleLR (cosine, div_factor 25, final_div_factor 1e4) as the reference, over 75 steps
    def rates(make) -> list[float]:
        optimizer = torch.optim.AdamW([nn.Parameter(torch.zeros(1))], lr=1e-2)
        scheduler, out = make(optimizer), []
        for _ in range(75):
            out.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            scheduler.step()
        return out

    ours = rates(lambda opt: warmup_cosine(opt, total_steps=75, warmup=0.1))
    torch_rates = rates(
        lambda opt: torch.optim.lr_scheduler.OneCycleLR(
            opt, max_lr=1e-2, total_steps=75, pct_start=0.1, cycle_momentum=False
        )
    )
    assert ours == pytest.approx(torch_rates, rel=1e-9, abs=1e-15)


def test_warmup_cosine_resumes_into_a_longer_run(cpu_trainer, tmp_path):
    # 2 epochs, then resumed to 3 (as a user extends a run with ckpt_path=last): OneCycleLR raises here
    # ("Tried to step 7 times"), warmup_cosine re-plans the remaining steps over the new total.
    schedule = StepSchedule(functools.partial(warmup_cosine, warmup=0.2))
    first = cpu_trainer(max_epochs=2, limit_val_batches=0, default_root_dir=tmp_path, enable_checkpointing=True)
    first.fit(Regression(schedule), train_dataloaders=batches(3))
    ckpt = tmp_path / "two.ckpt"
    first.save_checkpoint(ckpt)
    resumed = Regression(schedule)
    cpu_trainer(max_epochs=3, limit_val_batches=0, default_root_dir=tmp_path).fit(
        resumed, train_dataloaders=batches(3), ckpt_path=ckpt
    )
    reference = torch.optim.AdamW([nn.Parameter(torch.zeros(1))], lr=1e-2)
    fresh = warmup_cosine(reference, total_steps=9, warmup=0.2)
    expected = []
    for _ in range(9):
        expected.append(reference.param_groups[0]["lr"])
        reference.step()
        fresh.step()
    assert resumed.lrs == pytest.approx(expected[6:])  # steps 6-8 of a 9-step plan
    assert resumed.lrs[-1] < resumed.lrs[0]


def test_warmup_cosine_keeps_the_final_rate_past_its_end():
    optimizer = torch.optim.AdamW([nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = warmup_cosine(optimizer, total_steps=4, warmup=0.5, final_factor=0.01)
    for _ in range(6):
        optimizer.step()
        scheduler.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.01)
