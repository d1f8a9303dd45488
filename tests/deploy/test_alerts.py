"""The alerting rules under promtool: every alert fires on a series built for it and stays silent
on a healthy one (deploy/k8s/alert-tests/, one file per rule group).

promtool reads plain rule files, not the PrometheusRule CRD: the rule's `spec.groups` are written
to `rules.yaml` in a temporary directory, next to copies of the unit-test files that name it.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml

from tools import k8s_validate

Doc = dict[str, Any]

K8S = k8s_validate.K8S
ALERT_TESTS = K8S / "alert-tests"
RULES_FILE = "rules.yaml"  # what every unit-test file names in `rule_files`
METRIC = re.compile(r"\bagora_[a-z0-9_]+")


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail(
            "promtool is required to test the alerting rules and is not on PATH: install the "
            "Debian package `prometheus` (`make setup` does)",
            pytrace=False,
        )
    return path


def run_promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def rule_documents() -> list[tuple[Path, Doc]]:
    """Every PrometheusRule kept under deploy/k8s, wherever a kustomization keeps it."""
    found = []
    for path in sorted(K8S.rglob("*.yaml")):
        text = path.read_text()
        if ALERT_TESTS in path.parents or "PrometheusRule" not in text:
            continue
        for doc in yaml.safe_load_all(text):
            if isinstance(doc, dict) and doc.get("kind") == "PrometheusRule":
                found.append((path, doc))
    assert found, f"no PrometheusRule under {K8S}"
    return found


def rule_groups() -> list[Doc]:
    return [group for _, doc in rule_documents() for group in doc["spec"]["groups"]]


def alert_rules() -> dict[str, Doc]:
    rules: dict[str, Doc] = {}
    for group in rule_groups():
        for rule in group["rules"]:
            if "alert" in rule:
                assert rule["alert"] not in rules, f"alert {rule['alert']} defined twice"
                rules[rule["alert"]] = rule
    return rules


def unit_test_files() -> list[Path]:
    return sorted(ALERT_TESTS.glob("*.yaml"))


def write_workdir(directory: Path, groups: list[Doc]) -> Path:
    """`rules.yaml` (plain Prometheus rules) and the unit-test files, side by side."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / RULES_FILE).write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    for path in unit_test_files():
        shutil.copy(path, directory / path.name)
    return directory


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_workdir(tmp_path_factory.mktemp("alerts"), rule_groups())


def seconds(duration: str) -> int:
    """A Prometheus duration (`5m`, `1h30m`) in seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    parts = re.findall(r"(\d+)([smhdw])", duration)
    assert "".join(n + u for n, u in parts) == duration, duration
    return sum(int(n) * units[u] for n, u in parts)


def test_promtool_accepts_the_rules(workdir: Path) -> None:
    result = run_promtool("check", "rules", RULES_FILE, cwd=workdir)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", [p.name for p in unit_test_files()])
def test_alert_unit_tests_pass(workdir: Path, name: str) -> None:
    result = run_promtool("test", "rules", name, cwd=workdir)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_fires_on_its_series_and_stays_silent_on_a_healthy_one() -> None:
    rules = alert_rules()
    firing: dict[str, list[Doc]] = defaultdict(list)
    silent: dict[str, list[str]] = defaultdict(list)
    for path in unit_test_files():
        spec = yaml.safe_load(path.read_text())
        assert spec["rule_files"] == [RULES_FILE], path.name
        for case in spec["tests"]:
            series = {s["series"].split("{", 1)[0] for s in case.get("input_series", [])}
            for check in case.get("alert_rule_test", []):
                name = check["alertname"]
                assert name in rules, f"{path.name}: {name} is not an alert of the PrometheusRule"
                rule = rules[name]
                where = f"{path.name}: {case.get('name')} at {check['eval_time']}"
                if check.get("exp_alerts"):
                    firing[name].extend(check["exp_alerts"])
                    continue
                # Silent on a healthy series: the alert's own metrics are there, and its `for`
                # has elapsed, so silence is the expression's verdict.
                missing = set(METRIC.findall(rule["expr"])) - series
                assert not missing, f"{where}: silent without the series {sorted(missing)}"
                held = seconds(rule.get("for", "0s"))
                assert seconds(check["eval_time"]) >= held, f"{where}: before `for` elapsed"
                silent[name].append(where)
    for name, rule in rules.items():
        assert firing[name], f"{name}: no unit test where it fires"
        assert silent[name], f"{name}: no unit test where it stays silent on a healthy series"
        for alert in firing[name]:
            # alertname is the test's; the rule's labels (severity) and annotations are checked.
            assert alert["exp_labels"]["severity"] == rule["labels"]["severity"], name
            assert rule["labels"].items() <= alert["exp_labels"].items(), name
            assert set(alert["exp_annotations"]) == set(rule["annotations"]), name
            assert alert["exp_annotations"]["runbook_url"] == rule["annotations"]["runbook_url"]


def test_stream_lag_is_the_real_lag_not_the_sum_over_flusher_replicas(tmp_path: Path) -> None:
    """Every flusher replica samples the same lag: the unit tests (two replicas) catch a `sum`."""
    groups = rule_groups()
    [rule] = [r for g in groups for r in g["rules"] if r.get("alert") == "StreamLagGrowing"]
    assert "sum" not in rule["expr"]
    summed = rule["expr"].replace("max by (stream)", "sum by (stream)")
    assert summed != rule["expr"]
    rule["expr"] = summed
    result = run_promtool("test", "rules", "streams.yaml", cwd=write_workdir(tmp_path, groups))
    assert result.returncode != 0, "the unit tests accept a sum over replicas"
    output = result.stdout + result.stderr
    assert "StreamLagGrowing fires on a growing lag, valued per real lag" in output
    assert "StreamLagGrowing is silent below the threshold with two replicas" in output
    assert "3200 entries waiting" in output  # what the old rule said of a lag of 1600


@functools.cache
def rendered(directory: Path) -> list[Doc]:
    return k8s_validate.render(directory)


def renderable() -> list[Path]:
    """Bases and overlays (components render only inside an overlay)."""
    return [
        d
        for d in k8s_validate.kustomizations()
        if yaml.safe_load((d / "kustomization.yaml").read_text()).get("kind") != "Component"
    ]


def test_backlog_alert_compares_against_the_exported_bound() -> None:
    """No restated number: the bound is what ingest exports from MESSAGE_QUEUE_MAX
    (tests/observability/test_metrics.py checks the export)."""
    [expr] = [r["expr"] for r in alert_rules().values() if r["alert"] == "MessageBacklogNearBound"]
    assert "agora_message_backlog_bound" in expr
    assert not re.search(r"\d{4,}", expr), expr


def test_deployed_rules_are_the_tested_rules() -> None:
    sources = [doc["spec"] for _, doc in rule_documents()]
    for directory in renderable():
        for doc in rendered(directory):
            if doc["kind"] == "PrometheusRule":
                assert doc["spec"] in sources, f"{directory}: {doc['metadata']['name']} differs"
