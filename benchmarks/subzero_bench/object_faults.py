"""Object-store faults for ``subzero bench faults``: runs whose S3 requests fail.

Each trial runs the faults workflow (`subzero_bench.faults.build`, every strategy pinned)
with the local executor into ``s3://`` on moto's S3 server on loopback, through a
`subzero_bench.object_store.FaultProxy` that fails a fraction of requests (half ``503
SlowDown``, half connections reset), or all of them from some request on (an outage), and
judges the outcome through the same faulty proxy:

- ``exact``: the run finished and every output and every query (forced and chosen) equals
  the clean reference;
- ``refused clearly``: the run stopped with a `StoreError` naming the store and the service,
  and the store does not claim to be a finished run;
- ``wrong``: anything else (a wrong answer, an unclear error, a store marked done that is not).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

__all__ = ["Harness", "ObjectFaultTrial", "object_store_trials", "RATES"]

#: (label, failure rate, outage after this many requests or None)
RATES: tuple[tuple[str, float, int | None], ...] = (
    ("2% of requests fail", 0.02, None),
    ("5% of requests fail", 0.05, None),
    ("10% of requests fail", 0.10, None),
    ("outage after 200 requests", 0.0, 200),
)


@dataclass(frozen=True)
class Harness:
    """What the trials take from the fault bench (`subzero_bench.faults`), passed in so this
    module, which the fault bench calls, imports nothing of it: the workflow, its inputs, the
    run options of a plan, and the judge of a store against the clean run."""

    build: Callable[[], Any]
    inputs: Callable[[], dict[str, Any]]
    run_options: Callable[[str], dict[str, Any]]
    judge_store: Callable[..., Any]


@dataclass
class ObjectFaultTrial:
    """One run through a faulty proxy and what came of it."""

    faults: str
    requests: int
    injected: int
    slowdowns: int
    resets: int
    outcome: str  # "exact", "refused clearly" or "wrong"
    detail: str
    seconds: float

    @property
    def ok(self) -> bool:
        """True when the query was exact or refused with a clear error."""
        return self.outcome in ("exact", "refused clearly")


def _one(harness: Harness, service, ref, label: str, rate: float, outage: int | None, seed: int, n: int) -> ObjectFaultTrial:
    import subzero as sz
    from subzero_bench.object_store import FaultProxy
    from subzero.store import shards
    from subzero.store.location import configure_storage_options, restore_storage_defaults, storage_defaults

    store = f"s3://faults/{seed}-{n}-{int(rate * 1000)}-{outage or 0}"
    started = time.monotonic()
    saved = storage_defaults(store)
    with FaultProxy(service.endpoint, rate=rate, seed=seed * 1000 + n, outage_after=outage) as proxy:
        options: dict[str, Any] = {"endpoint_url": proxy.endpoint}
        if outage is not None:  # one botocore attempt per s3fs retry: an outage is reported in seconds
            options["config_kwargs"] = {"retries": {"max_attempts": 1}}
        configure_storage_options(store, options)
        try:
            try:
                harness.build().run(harness.inputs(), store=store, executor="local", **harness.run_options("pinned"))
            except sz.StoreError as exc:
                text = str(exc)
                named = store in text and f"S3 at {proxy.endpoint}" in text
                restore_storage_defaults(store, saved)  # judge the store directly
                try:
                    sz.open_run(store)
                    marked = True
                except sz.StoreError:
                    marked = False
                outcome = "refused clearly" if named and not marked else "wrong"
                detail = " ".join(text.split())[:400] + ("" if not marked else " (store marked done!)")
            except Exception as exc:  # noqa: BLE001 - an unclear failure counts against us
                outcome, detail = "wrong", f"unclear error {type(exc).__name__}: {exc}"[:200]
            else:
                shards.close_all()  # queries fetch their shards again, through the proxy
                verdict = harness.judge_store(store, ref)
                if verdict.opened and not verdict.wrong and not verdict.crashed and set(verdict.outcomes) == {"exact"}:
                    outcome, detail = "exact", f"{len(verdict.outcomes)} outputs and queries exact"
                else:
                    outcome, detail = "wrong", f"{verdict.summary}: {verdict.message[:160]}"
        finally:
            restore_storage_defaults(store, saved)
    return ObjectFaultTrial(label, proxy.requests, proxy.faults, proxy.slowdowns, proxy.resets, outcome, detail,
                            round(time.monotonic() - started, 1))


def object_store_trials(ref, harness: Harness, runs: int = 3, rates=RATES, seed: int = 0,
                        log: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """``runs`` trials per entry of ``rates`` against a fresh moto S3 server; returns the trials
    as dicts (with ``ok``); ``harness`` runs and judges each (`subzero_bench.faults.harness`)."""
    import contextlib

    from subzero import config
    from subzero_bench.object_store import s3_service

    log = log or (lambda line: print(line, flush=True))
    out = []
    with s3_service() as service:
        service.make_bucket("faults")
        for label, rate, outage in rates:
            # an outage: a short retry budget, so the trial takes seconds, not minutes
            short = config.set(s3_retries=2) if outage is not None else contextlib.nullcontext()
            for n in range(runs):
                with short:
                    trial = _one(harness, service, ref, label, rate, outage, seed, n)
                out.append(asdict(trial) | {"ok": trial.ok})
                log(f"faults: s3 {label} #{n}: {trial.injected}/{trial.requests} requests failed -> {trial.outcome}"
                    f"{'' if trial.ok else '  <-- NOT OK'}")
    return out


def render(trials: list[dict[str, Any]]) -> list[str]:
    """The report's section: one row per fault setting, totals of outcomes."""
    if not trials:
        return []
    lines = ["## Object storage: S3 requests failing", "",
             "The local executor runs the workflow into `s3://` on moto's S3 server on loopback through a proxy "
             "that fails requests (half `503 SlowDown`, half connections reset), and the store is judged "
             "through the same proxy: every output and every query against the clean run.", "",
             "| faults | runs | requests | failed (SlowDown / reset) | exact | refused clearly | wrong |",
             "|---|---|---|---|---|---|---|"]
    for label in dict.fromkeys(t["faults"] for t in trials):
        rows = [t for t in trials if t["faults"] == label]
        lines.append(f"| {label} | {len(rows)} | {sum(t['requests'] for t in rows)} | "
                     f"{sum(t['injected'] for t in rows)} ({sum(t['slowdowns'] for t in rows)} / "
                     f"{sum(t['resets'] for t in rows)}) | {sum(t['outcome'] == 'exact' for t in rows)} | "
                     f"{sum(t['outcome'] == 'refused clearly' for t in rows)} | "
                     f"{sum(t['outcome'] == 'wrong' for t in rows)} |")
    wrong = sum(t["outcome"] == "wrong" for t in trials)
    lines += ["", f"{len(trials)} runs, {sum(t['injected'] for t in trials)} faults injected: "
                  f"{sum(t['outcome'] == 'exact' for t in trials)} exact, "
                  f"{sum(t['outcome'] == 'refused clearly' for t in trials)} refused clearly, {wrong} wrong.", ""]
    refused = [t for t in trials if t["outcome"] == "refused clearly"]
    if refused:
        lines += [f"An outage's line: `{refused[0]['detail']}`", ""]
    return lines
