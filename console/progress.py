"""Training progress read from a job's own log lines: the step (and total), epoch, the rates
(steps/s, samples/s, tokens/s, per GPU or for the whole job), TFLOP/s, MFU and loss, without
any change to the training code.

One line at a time (:func:`parse_progress`); a line that is not training progress gives
``None``: a loss of 3.4 is not 3.4 it/s, a download or a ``datasets.map()`` bar is not
training, NCCL's ``Channel 23/64`` is not step 23 of 64. The formats, and the code that prints
each (tests/data/progress/README.md has the fields and units):

- tqdm bars (``tqdm.std.format_meter``: ``n/total [elapsed<remaining, rate{it/s|s/it}, postfix]``),
  as Hugging Face Trainer, PyTorch Lightning (``Epoch N: ...``) and Accelerate scripts print
  them; a bar whose description names something else (loading, downloading, validating,
  mapping) is not training;
- Hugging Face Trainer's log dicts (``Trainer.log``: ``{'loss': ..., 'epoch': ...}``; the last
  one's ``train_samples_per_second``/``train_steps_per_second`` from ``speed_metrics``, whole
  job), its ``***** train metrics *****`` rows and the ``TrainOutput(...)`` it returns;
  ``eval_*`` keys are evaluation, not training;
- JSON lines (``{"step": ..., "loss": ...}``, the explicit form below);
- ``key: value`` lines: torchtitan (``step: N  loss: ...  tps: ...  tflops: ...  mfu: ...%``,
  per GPU), Megatron-LM (``iteration N/ M | elapsed time per iteration (ms): ... | throughput
  per GPU (TFLOP/s/GPU): ... | lm loss: ...``), DeepSpeed (``steps: N loss: ... iter time (s):
  ... samples/sec: ...``; ``ThroughputTimer``'s ``epoch=E/micro_step=M/global_step=S,
  ...CurrSamplesPerSec=...``, whole job), nanoGPT (``iter N: loss L, time T ms, mfu M%``;
  ``mfu -100.00%`` is "not measured yet"), nanotron (SI suffixes: ``28.2K``), MaxText,
  TensorFlow, MXNet and others; detection trainers: mmcv's runner (``Epoch [1][2150/29317] ...
  time: 0.391, data_time: ...``) and MMEngine's (``Epoch(train) [1][ 50/1000]``,
  ``Iter(train) [ 50/90000]``; its ``Epoch(val)`` is not training), maskrcnn-benchmark's
  MetricLogger (``iter: N  loss: L (avg) ... time: s (avg)  data: ...``: seconds per
  iteration), Detectron's ``json_stats: {"iter": ..., "time": ...}``; old fairseq's simple bar
  (``| epoch 010  2000 / 8223 loss=1.27 (1.50), wps=962``; its ``valid on 'valid' subset``
  lines are not training).

The explicit form, for a script that wants to be read exactly: one line
``gpuconsole:progress {json}`` whose object holds any of :class:`Progress`'s field names
(``{"step": 120, "total": 5000, "tokens_per_s": 51200, "rate_scope": "total"}``).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, fields
from typing import Any, Literal

RateScope = Literal["gpu", "total"]
"""Whose rate a line reports: one GPU's (torchtitan's ``tps``, ``..._per_gpu``, ``/device``)
or the whole job's (Hugging Face's ``train_samples_per_second``, DeepSpeed's
``SamplesPerSec``); ``None`` on :class:`Progress` when the line does not say."""

#: the explicit form's prefix (module docstring)
EXPLICIT_PREFIX = "gpuconsole:progress "


@dataclass(frozen=True)
class Progress:
    """What one log line says about training progress; ``None`` where it says nothing.

    Attributes:
        step: the step, iteration or batch counter as printed (a Lightning bar counts
            batches within the epoch).
        total: the total steps, when printed beside the step.
        epoch: the epoch (Hugging Face's is fractional).
        it_per_s: steps (iterations) per second, also from a time per step.
        samples_per_s: samples (examples) per second.
        tokens_per_s: tokens per second.
        rate_scope: whose ``samples_per_s``/``tokens_per_s`` it is (:data:`RateScope`).
        tflops: TFLOP/s per GPU, as the job reports it (gpuconsole does not guess model
            FLOPs).
        mfu_pct: model FLOPs utilization in %, as the job reports it.
        loss: the training loss (NaN when the job prints nan).
    """

    step: int | None = None
    total: int | None = None
    epoch: float | None = None
    it_per_s: float | None = None
    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    rate_scope: RateScope | None = None
    tflops: float | None = None
    mfu_pct: float | None = None
    loss: float | None = None

    @property
    def says_progress(self) -> bool:
        """Whether the line says how far or how fast training is (a loss alone does not)."""
        return any(
            v is not None
            for v in (
                self.step,
                self.total,
                self.epoch,
                self.it_per_s,
                self.samples_per_s,
                self.tokens_per_s,
                self.tflops,
                self.mfu_pct,
            )
        )


_NUM = r"[-+]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_SI = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def _num(text: str) -> float | None:
    """``10,050`` / ``1.818812E+00`` / ``28.2K`` / ``nan`` as a float."""
    t = text.strip().strip("'\"").replace(",", "")
    if t.lower() == "nan":
        return math.nan
    scale = 1.0
    if t and t[-1] in _SI:
        scale, t = _SI[t[-1]], t[:-1]
    try:
        return float(t) * scale
    except ValueError:
        return None


def _int(text: str) -> int | None:
    v = _num(text)
    return int(v) if v is not None and not math.isnan(v) and v == int(v) else None


# -- what is not training progress --------------------------------------------------------

_BYTES_RATE = re.compile(r"\d\s*[kKMGT]?i?B/s\b")
_BAR_DESC = re.compile(r"^\s*(?P<desc>[^|\[\]]*?):\s+\d{1,3}%")
_NOT_TRAINING = re.compile(
    r"load|download|upload|fetch|valid|eval|test|predict|infer|map|token|standardiz|filter|"
    r"shard|sanity|generat|convert|extract|prepar|process|sampl|index|cach|saving",
    re.I,
)
_NOISE_WORDS = ("nccl", "time (ms)", "overflow", "examples/s", "step ", "valid on", "epoch(")
_NOISE = (
    re.compile(r"\bNCCL (?:INFO|WARN)\b"),
    re.compile(r"^\s*Step \d+/\d+ : "),  # docker build's steps
    re.compile(r"^\s*time \(ms\) \|"),  # DeepSpeed's wall-clock breakdown (timers in ms)
    re.compile(r"\bOVERFLOW!"),
    re.compile(r"examples/s\]"),  # datasets' map()/filter() bars
    re.compile(r"\bvalid on '[^']*' subset"),  # fairseq's validation lines
    re.compile(r"\bEpoch\((?:val|test)\)"),  # MMEngine's validation / test loops
)


def _not_training(line: str, low: str) -> bool:
    if "b/s" in low and _BYTES_RATE.search(line):
        return True
    if any(w in low for w in _NOISE_WORDS) and any(p.search(line) for p in _NOISE):
        return True
    m = _BAR_DESC.match(line) if "%" in line else None
    return bool(m and m.group("desc").strip() and _NOT_TRAINING.search(m.group("desc")))


# -- tqdm bars ----------------------------------------------------------------------------

_BAR = re.compile(
    r"(?P<n>\d+)(?:/(?P<total>\d+)|it)\s*\[(?P<elapsed>[\d:]+)(?:<[\d:?]+)?,\s*"
    r"(?P<rate>[\d.]+|\?)\s*(?P<unit>it/s|s/it)(?P<post>[^\]]*)\]"
)
_POSTFIX = re.compile(r"(\w+)=([^,\]]*)")
_EPOCH_DESC = re.compile(r"^\s*Epoch (\d+)\b")


def _loss_of(pairs: list[tuple[str, str]]) -> float | None:
    """The training loss among ``key, value`` pairs: ``loss`` itself, else a key ending in
    ``loss`` that is not an evaluation's or a scale."""
    for k, v in pairs:
        if k == "loss":
            return _num(v)
    for k, v in pairs:
        low = k.lower()
        if low.endswith("loss") and not re.search(r"val|eval|test|scale|balanc", low):
            return _num(v)
    return None


def _from_bar(line: str, m: re.Match[str]) -> Progress:
    rate = _num(m.group("rate")) if m.group("rate") != "?" else None
    if rate is not None and m.group("unit") == "s/it":
        rate = 1.0 / rate if rate else None
    post = _POSTFIX.findall(m.group("post"))
    epoch: float | None = None
    if (e := _EPOCH_DESC.match(line)) is not None:
        epoch = float(e.group(1))
    else:
        epoch = next((_num(v) for k, v in post if k == "epoch"), None)
    return Progress(
        step=int(m.group("n")),
        total=int(m.group("total")) if m.group("total") else None,
        epoch=epoch,
        it_per_s=rate,
        loss=_loss_of(post),
    )


# -- dicts: Hugging Face, JSON, the explicit form -----------------------------------------

_PY_PAIR = re.compile(r"'([^']+)':\s*('?)([^,'}]+)\2")


def _from_mapping(d: dict[str, Any]) -> Progress:
    """A flat mapping of a log record (Hugging Face's dict, a JSON line)."""
    pairs = [(str(k), str(v)) for k, v in d.items() if not isinstance(v, dict | list)]
    train = [(k, v) for k, v in pairs if not re.match(r"(eval|val|test)_", k)]
    get = {k: v for k, v in train}

    def num(*keys: str) -> float | None:
        return next((_num(get[k]) for k in keys if k in get), None)

    step = num("step", "global_step", "iteration", "iter")
    samples = num("train_samples_per_second", "samples_per_second")
    tokens = num("tokens_per_second", "tokens_per_s")
    loss = num("loss", "train_loss", "training_loss")
    if loss is None:
        loss = next(
            (
                _num(v)
                for k, v in train
                if re.search(r"(^|/)(train_)?loss", k) and not re.search(r"val|eval", k)
            ),
            None,
        )
    if d.get("name") == "loss" and isinstance(d.get("data"), dict):  # {"name", "data"} logs
        inner = _from_mapping(d["data"])
        value = d["data"].get("value")
        return Progress(
            step=inner.step, epoch=inner.epoch, loss=_num(str(value)) if value is not None else None
        )
    it_per_s = num("train_steps_per_second", "steps_per_second")
    if it_per_s is None and ("iter" in get or "data_time" in get):
        # Detectron's json_stats, detectron2's / MMEngine's metrics: "time" is seconds per
        # iteration there (elsewhere it may be a timestamp)
        per = num("time")
        it_per_s = 1.0 / per if per is not None and 0 < per < 3600 else None
    return Progress(
        step=int(step) if step is not None and not math.isnan(step) else None,
        epoch=num("epoch"),
        it_per_s=it_per_s,
        samples_per_s=samples,
        tokens_per_s=tokens,
        rate_scope="total" if samples is not None and "train_samples_per_second" in get else None,
        loss=loss,
    )


def _explicit(text: str) -> Progress | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    known = {f.name for f in fields(Progress)}
    kept: dict[str, Any] = {}
    for k, v in data.items():
        if k not in known:
            continue
        if k == "rate_scope":
            if v not in ("gpu", "total"):
                return None  # a scope gpuconsole cannot read: the rates' meaning is unknown
            kept[k] = v
        elif k in ("step", "total"):
            if isinstance(v, int) and not isinstance(v, bool):
                kept[k] = v
        elif isinstance(v, int | float) and not isinstance(v, bool):
            kept[k] = float(v)
    return Progress(**kept)


_TRAIN_OUTPUT = re.compile(r"TrainOutput\(global_step=(\d+), training_loss=(" + _NUM + r")")
_HF_ROW = re.compile(
    r"^\s*(train_samples_per_second|train_steps_per_second|train_loss|epoch)\s*=\s*("
    + _NUM
    + r")\s*$"
)


# -- key: value lines ---------------------------------------------------------------------

_STEP_PATTERNS = (
    re.compile(r"\bglobal_step=(\d+)"),
    re.compile(
        r"\b(?:global step|iteration|iter|steps?)(?![A-Za-z_])\s*[:=]?\s*(\d[\d,]*)"
        r"(?:\s*/\s*(\d[\d,]*))?",
        re.I,
    ),
    re.compile(r"\bEpoch: \[\d+\]\s+\[\s*(\d+)/(\d+)\]"),  # torchvision's MetricLogger
    # mmcv's runner "Epoch [1][2150/29317]", MMEngine's "Epoch(train) [1][ 50/1000]" and
    # "Iter(train) [  50/90000]"
    re.compile(r"\b(?:Epoch|Iter)(?:\(train\))?\s*(?:\[\d+\])?\[\s*(\d+)/(\d+)\]"),
    re.compile(r"^\|\s*epoch \d+:?\s+(\d+) / (\d+)\b"),  # fairseq's simple progress bar
    re.compile(r"\bBatch \[(\d+)\]"),  # MXNet's Speedometer
    re.compile(r"\|\s*(\d+)/(\d+)\s*\|"),  # a "| n/total |" field
    re.compile(r"^\s*(\d+)\s*\|\s*loss\b"),  # llama2.c: "490 | loss ..."
)
_DS_EPOCH_STEP = re.compile(r"\]\s*(\d+)/(\d+),\s*SamplesPerSec=")  # DeepSpeed before 0.9
_EPOCH = re.compile(r"\bepoch\b\s*[:=]?\s*\[?\s*(\d+(?:\.\d+)?)", re.I)
#: (a word the line must hold, pattern, what to do with the number): steps/s from a rate or
#: a time per step
_IT_RATE = (
    ("it/s", re.compile(r"(" + _NUM + r")\s*it/s(?:ec)?\b"), 1.0),
    ("s/it", re.compile(r"(" + _NUM + r")\s*s/it\b"), -1.0),
    ("steps/sec", re.compile(r"\bsteps/sec:\s*(" + _NUM + r")", re.I), 1.0),
    (
        "per_iteration",
        re.compile(r"elapsed[ _]time[ _]per[ _]iteration[ _]\(?ms\)?:\s*(" + _NUM + r"[KM]?)"),
        -1e3,
    ),
    (
        "per iteration",
        re.compile(r"elapsed[ _]time[ _]per[ _]iteration[ _]\(?ms\)?:\s*(" + _NUM + r"[KM]?)"),
        -1e3,
    ),
    ("iter time", re.compile(r"\biter time \(s\):\s*(" + _NUM + r")"), -1.0),
    ("time ", re.compile(r"\btime\s+(" + _NUM + r")\s*ms\b"), -1e3),
    ("dt:", re.compile(r"\bdt:\s*(" + _NUM + r")\s*ms\b"), -1e3),
    ("ms", re.compile(r"\|\s*(" + _NUM + r")\s*ms\s*\|"), -1e3),
    ("seconds:", re.compile(r"\bcompleted step: \d+, seconds:\s*(" + _NUM + r")"), -1.0),
    ("sec/", re.compile(r"(" + _NUM + r")\s*sec/(?:batch|step)\b"), -1.0),
    ("per-step time", re.compile(r"\bper-step time\s*(" + _NUM + r")\s*s\b"), -1.0),
    # maskrcnn-benchmark / Detectron's MetricLogger "time: 0.5063 (0.5132)  data: ...", mmcv's
    # "time: 0.391, data_time: 0.009": seconds per iteration
    (
        "time:",
        re.compile(r"\btime:\s*(" + _NUM + r")(?:\s*\(" + _NUM + r"\))?,?\s+data(?:_time)?:"),
        -1.0,
    ),
)
#: (pattern, scope)
_SAMPLES = (
    (re.compile(r"\bCurrSamplesPerSec=(" + _NUM + r")"), "total"),
    (re.compile(r"\bSamplesPerSec=(" + _NUM + r")"), "total"),
    (re.compile(r"\bsamples/sec:\s*(" + _NUM + r")"), "total"),
    (re.compile(r"\bSpeed:\s*(" + _NUM + r")\s*samples/sec"), None),
    (re.compile(r"(" + _NUM + r")\s*(?:examples|samples)/sec\b"), None),
    (re.compile(r"\b(?:examples|samples)/s(?:ec)?\s*[:=]?\s*(" + _NUM + r")(?![\w/])"), None),
)
_TOKENS = (
    (re.compile(r"\btokens_per_sec:\s*(" + _NUM + r"[KMG]?)"), "total"),
    (re.compile(r"\btok/sec:\s*(" + _NUM + r")"), "total"),
    (re.compile(r"\btokens_per_second_per_gpu:\s*(" + _NUM + r")"), "gpu"),
    (re.compile(r"\bTokens/s/device:\s*(" + _NUM + r")"), "gpu"),
    (re.compile(r"\b(?:tps|wps):\s*(" + _NUM + r")"), "gpu"),
    (re.compile(r"\bwps=(" + _NUM + r")"), None),  # fairseq: words (target tokens) per second
    (re.compile(r"\btokens_per_second:\s*(" + _NUM + r")"), None),
    (re.compile(r"\b(?:tokens|tok)/s(?:ec)?\s*[:=]?\s*(" + _NUM + r")(?![\w/])"), None),
    (re.compile(r"(" + _NUM + r")\s*(?:tokens|tok)/s(?:ec)?\b"), None),
)
_TFLOPS = (
    re.compile(r"\btflops:\s*(" + _NUM + r")"),
    re.compile(r"\(TFLOP/s/GPU\):\s*(" + _NUM + r")"),
    re.compile(r"\bTFLOP/s/device:\s*(" + _NUM + r")"),
    re.compile(r"\bTFLOP/s:\s*(" + _NUM + r")"),
    re.compile(r"\bmodel_tflops_per_gpu:\s*(" + _NUM + r")"),
)
_FLOPS_UNIT = re.compile(r"\bapprox flops per GPU:\s*(" + _NUM + r")\s*([GTP])FLOPS")
_MFU = re.compile(r"\bmfu:?\s*(" + _NUM + r")\s*%?", re.I)
_LOSS = (
    re.compile(r"\blm[ _]loss:\s*(" + _NUM + r")"),
    re.compile(r"\bloss\b\s*[:=]?\s*(" + _NUM + r"|nan)\b", re.I),
    re.compile(r"\b(\w*loss)\s*[:=]\s*(" + _NUM + r")", re.I),
)


def _first(patterns: Any, line: str) -> tuple[re.Match[str], Any] | None:
    for p, extra in patterns:
        if (m := p.search(line)) is not None:
            return m, extra
    return None


def _from_fields(line: str) -> Progress:
    # each group of patterns only where its word is (a regex search that starts with a number
    # tries every position of the line: the words keep a noisy line cheap)
    low = line.lower()
    step = total = None
    epoch: float | None = None
    if "samplespersec=" in low and (ds := _DS_EPOCH_STEP.search(line)) is not None:
        epoch, step = float(ds.group(1)), int(ds.group(2))
    else:
        for p in _STEP_PATTERNS:
            if (m := p.search(line)) is not None:
                step = _int(m.group(1))
                if m.lastindex and m.lastindex >= 2 and m.group(2):
                    total = _int(m.group(2))
                break
        if "epoch" in low and (e := _EPOCH.search(line)) is not None:
            epoch = float(e.group(1))
        if step is not None and epoch is not None and re.search(r"\bepoch \d+/\d+", line, re.I):
            if (em := re.search(r"\bepoch (\d+)/(\d+)", line, re.I)) and _int(em.group(1)) == step:
                step = total = None  # "epoch 11/50": epochs, not steps
    it = None
    for word, p, how in _IT_RATE:
        if word in low and (m := p.search(line)) is not None:
            v = _num(m.group(1))
            if v is not None:
                it = v * how if how > 0 else (-how / v if v else None)
            break
    samples = scope = None
    if ("sample" in low or "example" in low) and (hit := _first(_SAMPLES, line)) is not None:
        samples, scope = _num(hit[0].group(1)), hit[1]
    tokens = None
    if any(w in low for w in ("tok", "tps", "wps")) and (hit := _first(_TOKENS, line)):
        tokens, scope = _num(hit[0].group(1)), hit[1]
    flops = "flop" in low
    tflops = next((_num(m.group(1)) for p in _TFLOPS if flops and (m := p.search(line))), None)
    if flops and tflops is None and (fm := _FLOPS_UNIT.search(line)) is not None:
        v = _num(fm.group(1))
        tflops = v * {"G": 1e-3, "T": 1.0, "P": 1e3}[fm.group(2)] if v is not None else None
    mfu = None
    if "mfu" in low and (mm := _MFU.search(line)) is not None:
        mfu = _num(mm.group(1))
        if mfu is not None and mfu < 0:  # nanoGPT's -100%: not measured yet
            mfu = None
    loss = None
    for p in _LOSS if "loss" in low else ():
        if (lm := p.search(line)) is not None:
            key, value = (lm.group(1), lm.group(2)) if lm.lastindex == 2 else ("loss", lm.group(1))
            if not re.search(r"val|eval|scale|balanc", key, re.I):
                loss = _num(value)
                break
    return Progress(
        step=step,
        total=total,
        epoch=epoch,
        it_per_s=it,
        samples_per_s=samples,
        tokens_per_s=tokens,
        rate_scope=scope if (samples is not None or tokens is not None) else None,
        tflops=tflops,
        mfu_pct=mfu,
        loss=loss,
    )


#: a word every format above has (lower case); a line without one is not read further
_CANDIDATE = (
    "step",
    "iter",
    "it/s",
    "s/it",
    "loss",
    "epoch",
    "/sec",
    "per_s",
    "tps",
    "wps",
    "flop",
    "mfu",
    "sample",
    "tok",
    "batch",
    "progress",
    "{",
)


def parse_progress(line: str) -> Progress | None:
    """What ``line`` (one physical log line, a launcher's prefix such as ``[rank3]:``
    allowed) says about training progress, ``None`` when it is not training progress
    (module docstring)."""
    low = line.lower()
    if not any(w in low for w in _CANDIDATE):  # most of a training log: done here
        return None
    if (i := line.find(EXPLICIT_PREFIX)) >= 0:
        explicit = _explicit(line[i + len(EXPLICIT_PREFIX) :])
        explicit = _sane(explicit) if explicit is not None else None
        return explicit if explicit is not None and explicit.says_progress else None
    if _not_training(line, low):
        return None
    body = line.strip()
    found: Progress | None = None
    bar = _BAR.search(line) if "it/s" in low or "s/it" in low else None
    to = _TRAIN_OUTPUT.search(line) if "TrainOutput(" in line else None
    if bar is not None:
        found = _from_bar(line, bar)
    elif to is not None:
        metrics = {k: v for k, _, v in _PY_PAIR.findall(line)}
        base = _from_mapping(metrics)
        found = Progress(
            step=int(to.group(1)),
            epoch=base.epoch,
            it_per_s=base.it_per_s,
            samples_per_s=base.samples_per_s,
            rate_scope=base.rate_scope,
            loss=_num(to.group(2)),
        )
    elif body.startswith("{'"):
        found = _from_mapping({k: v for k, _, v in _PY_PAIR.findall(body)})
    elif body.startswith('{"') or "json_stats: {" in body:
        # a JSON line, or Detectron's "json_stats: {...}"
        start = body.find("{") if body.startswith('{"') else body.index("json_stats: {") + 12
        try:
            data, _ = json.JSONDecoder().raw_decode(body[start:])
        except ValueError:
            data = None
        found = _from_mapping(data) if isinstance(data, dict) else None
    elif "=" in line and (row := _HF_ROW.match(line)) is not None:
        found = _from_mapping({row.group(1): row.group(2)})
    else:
        found = _from_fields(line)
    found = _sane(found) if found is not None else None
    return found if found is not None and found.says_progress else None


#: The largest value taken for a rate, TFLOP/s or a step counter (above: a misprint).
_MAX = 1e15


def _sane(p: Progress) -> Progress:
    """``p`` with the values no training can have made unknown: infinities, negative steps,
    totals, epochs, rates and TFLOP/s, MFU outside 0-100 %, a total under the step (a NaN
    loss is kept: the job printed it)."""

    def ok(v: float | None, hi: float = _MAX) -> float | None:
        return v if v is not None and math.isfinite(v) and 0 <= v <= hi else None

    step = p.step if p.step is not None and 0 <= p.step <= _MAX else None
    total = p.total if p.total is not None and 0 < p.total <= _MAX else None
    if total is not None and step is not None and total < step:
        total = None
    loss = p.loss if p.loss is None or not math.isinf(p.loss) else None
    rates = (ok(p.it_per_s), ok(p.samples_per_s), ok(p.tokens_per_s))
    new = Progress(
        step=step,
        total=total,
        epoch=ok(p.epoch),
        it_per_s=rates[0],
        samples_per_s=rates[1],
        tokens_per_s=rates[2],
        rate_scope=p.rate_scope,
        tflops=ok(p.tflops),
        mfu_pct=ok(p.mfu_pct, 100.0),
        loss=loss,
    )
    return p if new == p else new
