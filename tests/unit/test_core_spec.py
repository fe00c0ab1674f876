"""ChainSpec/StageSpec validation, image references, quantities and shell quoting."""

from __future__ import annotations

import json
import subprocess
from decimal import Decimal

import pytest

from airflow_kruise_chain.core import (
    ChainConfigError,
    ChainSpec,
    StageSpec,
    parse_image_reference,
    parse_quantity,
)
from airflow_kruise_chain.core.spec import MAX_NAME_LENGTH

DIGEST = "sha256:" + "ab" * 32


def stage(name: str = "extract", image: str = "acme/extract:1.4", **kwargs) -> StageSpec:
    kwargs.setdefault("cmds", ["python", "main.py"])
    return StageSpec(name=name, image=image, **kwargs)


def chain(*stages: StageSpec, **kwargs) -> ChainSpec:
    kwargs.setdefault("namespace", "data")
    return ChainSpec(name=kwargs.pop("name", "etl"), stages=stages or (stage(),), **kwargs)


def config_error(spec: ChainSpec) -> ChainConfigError:
    with pytest.raises(ChainConfigError) as info:
        spec.validate()
    return info.value


def test_valid_chain_passes() -> None:
    chain(
        stage(
            "extract", env={"MODE": "full"}, resources={"requests": {"cpu": "500m"}, "limits": {"cpu": "1"}}
        ),
        stage("transform", "registry.example.com:5000/team/transform@" + DIGEST, arguments=["--x"]),
        scratch_size_limit="2Gi",
        node_selector={"pool": "etl"},
        tolerations=[{"key": "k", "operator": "Exists"}],
        service_account_name="runner",
        image_pull_secrets=["regcred"],
        labels={"team": "data"},
        annotations={"example.com/owner": "me"},
        pod_template={"spec": {"priorityClassName": "high"}},
    ).validate()


def test_error_is_value_error_naming_the_field() -> None:
    err = config_error(chain(stage("Bad_Name")))
    assert isinstance(err, ValueError)
    assert err.field == "stages[0].name"
    assert str(err).startswith("stages[0].name: 'Bad_Name' is invalid")


@pytest.mark.parametrize("name", ["", "Upper", "-lead", "trail-", "under_score", "a" * (MAX_NAME_LENGTH + 1)])
def test_invalid_chain_and_stage_names(name: str) -> None:
    assert config_error(chain(name=name)).field == "name"
    assert config_error(chain(stage(name))).field == "stages[0].name"


def test_longest_name_is_accepted() -> None:
    chain(stage("s" * MAX_NAME_LENGTH), name="c" * MAX_NAME_LENGTH).validate()


def test_duplicate_stage_names() -> None:
    err = config_error(chain(stage("a"), stage("b"), stage("a")))
    assert err.field == "stages[2].name" and "duplicate" in err.message


def test_missing_or_invalid_namespace() -> None:
    assert config_error(chain(namespace="")).field == "namespace"
    assert config_error(chain(namespace="Data")).field == "namespace"


def test_no_stages() -> None:
    assert config_error(ChainSpec(name="etl", namespace="data", stages=[])).field == "stages"


def test_empty_command() -> None:
    err = config_error(chain(stage(cmds=[], arguments=["--flag"])))
    assert err.field == "stages[0].cmds" and "cmds=[" in err.message


@pytest.mark.parametrize(
    ("reference", "registry", "path", "tag", "digest"),
    [
        ("busybox", None, "busybox", None, None),
        ("busybox:1.36", None, "busybox", "1.36", None),
        ("library/busybox:latest", None, "library/busybox", "latest", None),
        ("docker.io/library/busybox", "docker.io", "library/busybox", None, None),
        ("localhost/app", "localhost", "app", None, None),
        ("localhost:5000/a/b_c__d-e.f:v1.0-rc_1", "localhost:5000", "a/b_c__d-e.f", "v1.0-rc_1", None),
        ("registry.example.com:443/team/app@" + DIGEST, "registry.example.com:443", "team/app", None, DIGEST),
        ("ghcr.io/o/app:2@" + DIGEST, "ghcr.io", "o/app", "2", DIGEST),
        ("[::1]:5000/app:1", "[::1]:5000", "app", "1", None),
        ("Registry/app", "Registry", "app", None, None),
        ("app:" + "t" * 128, None, "app", "t" * 128, None),
    ],
)
def test_valid_image_references(reference, registry, path, tag, digest) -> None:
    ref = parse_image_reference(reference)
    assert (ref.registry, ref.path, ref.tag, ref.digest) == (registry, path, tag, digest)
    assert str(ref) == reference


@pytest.mark.parametrize(
    "reference",
    [
        "",
        " busybox",
        "Busybox",
        "acme/Extract:1",
        "a//b",
        "a/b/",
        "ubuntu:",
        ":1.0",
        "app:-bad",
        "app:.bad",
        "app:" + "t" * 129,
        "app:1 2",
        "app@sha256:abc",
        "app@sha256:" + "AB" * 32,
        "app@md5:" + "a" * 32,
        "a:b:c",
        "bad_host:5000:x/app",
        "-registry.io/app",
        "app-/x",
    ],
)
def test_invalid_image_references(reference: str) -> None:
    with pytest.raises(ValueError):
        parse_image_reference(reference)
    err = config_error(chain(stage(image=reference)))
    assert err.field == "stages[0].image" and "example:" in err.message


def test_repository_normalisation_and_floating() -> None:
    assert parse_image_reference("busybox").repository == "docker.io/library/busybox"
    assert parse_image_reference("acme/app:1").repository == "docker.io/acme/app"
    assert parse_image_reference("quay.io/x/y:1").repository == "quay.io/x/y"
    assert parse_image_reference("busybox").floating
    assert parse_image_reference("busybox:latest").floating
    assert not parse_image_reference("busybox:1").floating
    assert not parse_image_reference("busybox@" + DIGEST).floating


@pytest.mark.parametrize(
    "name",
    ["1X", "A-B", "A.B", "", "KC_GENERATION", "KC_ANY", "CHAIN_OUTPUT", "CHAIN_SCRATCH", "kc_p", "kc_x"],
)
def test_bad_env_names(name: str) -> None:
    assert config_error(chain(stage(env={name: "v"}))).field == f"stages[0].env[{name!r}]"


SHELL_NAMES = (
    "IFS",
    "PWD",
    "OLDPWD",
    "PPID",
    "OPTIND",
    "OPTARG",
    "UID",
    "EUID",
    "LINENO",
    "SHELLOPTS",
    "BASHOPTS",
)


def test_names_a_shell_sets_are_accepted() -> None:
    # runner v2 execs the stage with the env as given (tests/unit/test_core_runner.py checks every byte)
    chain(stage(env={name: "v" for name in SHELL_NAMES})).validate()


def test_nul_in_arguments_or_env() -> None:
    assert config_error(chain(stage(arguments=["a\x00b"]))).field == "stages[0].arguments[0]"
    assert config_error(chain(stage(env={"A": "\x00"}))).field == "stages[0].env['A']"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", Decimal(1)),
        ("500m", Decimal("0.5")),
        ("1.5Gi", Decimal(1.5 * 2**30)),
        ("2Ki", Decimal(2048)),
        ("1e3", Decimal(1000)),
        ("1E", Decimal(10**18)),
        ("+.5k", Decimal(500)),
        ("100n", Decimal("0.0000001")),
    ],
)
def test_parse_quantity(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1.2.3", "10XB", "1 Gi", "1ki", "NaN", "1_000", "Infinity"])
def test_bad_quantities(text: str) -> None:
    with pytest.raises(ValueError):
        parse_quantity(text)
    err = config_error(chain(stage(resources={"requests": {"memory": text}})))
    assert err.field == "stages[0].resources.requests['memory']"


def test_resource_rules() -> None:
    assert config_error(chain(stage(resources={"requests": {"cpu": "-1"}}))).message == "'-1' is negative"
    assert config_error(chain(stage(resources={"limit": {"cpu": "1"}}))).field == "stages[0].resources"
    err = config_error(chain(stage(resources={"requests": {"cpu": "2"}, "limits": {"cpu": "1500m"}})))
    assert err.field == "stages[0].resources.requests['cpu']" and "exceeds the limit" in err.message
    assert config_error(chain(scratch_size_limit="lots")).field == "scratch_size_limit"


def test_other_stage_fields() -> None:
    assert config_error(chain(stage(image_pull_policy="Sometimes"))).field == "stages[0].image_pull_policy"
    assert config_error(chain(stage(max_outputs_bytes=1 << 20))).field == "stages[0].max_outputs_bytes"
    err = config_error(chain(stage(arguments=["x" * 70_000])))
    assert err.field == "stages[0].cmds" and "scratch volume" in err.message


def test_metadata_and_pass_throughs() -> None:
    assert (
        config_error(chain(labels={"airflow-kruise-chain/x": "y"})).field
        == "labels['airflow-kruise-chain/x']"
    )
    assert config_error(chain(labels={"team": "not valid!"})).field == "labels['team']"
    assert config_error(chain(annotations={"bad key!": "v"})).field == "annotations['bad key!']"
    chain(annotations={"note": "any text, even spaces: fine"}).validate()
    assert config_error(chain(node_selector={"pool": 1})).field == "node_selector"
    assert config_error(chain(tolerations=["nope"])).field == "tolerations[0]"
    assert config_error(chain(service_account_name="Bad SA")).field == "service_account_name"
    assert config_error(chain(image_pull_secrets=["ok", "Not_OK"])).field == "image_pull_secrets[1]"
    assert config_error(chain(affinity=["x"])).field == "affinity"


@pytest.mark.parametrize(
    ("template", "field"),
    [
        ({"metadata": {"name": "x"}}, "pod_template.metadata.name"),
        ({"metadata": {"namespace": "x"}}, "pod_template.metadata.namespace"),
        ({"spec": {"restartPolicy": "Never"}}, "pod_template.spec.restartPolicy"),
        ({"spec": {"shareProcessNamespace": True}}, "pod_template.spec.shareProcessNamespace"),
        ({"spec": {"hostPID": True}}, "pod_template.spec.hostPID"),
        (
            {"spec": {"containers": [{"name": "slot-b", "command": ["x"]}]}},
            "pod_template.spec.containers[slot-b].command",
        ),
        (
            {"spec": {"containers": [{"name": "slot-a", "env": []}]}},
            "pod_template.spec.containers[slot-a].env",
        ),
    ],
)
def test_pod_template_cannot_break_the_runner_contract(template: dict, field: str) -> None:
    assert config_error(chain(pod_template=template)).field == field


def test_specs_are_immutable_values() -> None:
    cmds = ["echo", "hi"]
    spec = stage(cmds=cmds)
    cmds.append("mutated")
    assert spec.cmds == ("echo", "hi")
    assert chain(stage("a"), stage("b")).stage("b").name == "b"
    with pytest.raises(KeyError):
        chain().stage("missing")


def test_first_images() -> None:
    assert chain(stage("a", "img/a:1"), stage("b", "img/b:1"), stage("c", "img/c:1")).first_images == (
        "img/a:1",
        "img/b:1",
    )
    assert chain(stage("a", "img/a:1")).first_images == ("img/a:1", "img/a:1")


TRICKY = [
    "plain",
    "two words",
    "it's",
    'say "hi"',
    "$HOME and `id` and $(id)",
    "back\\slash",
    "new\nline",
    "",
    "*",
    "ü",
]


def test_run_spec_round_trips_argv_and_env_through_busybox_sh() -> None:
    env = {f"V{i}": value for i, value in enumerate(TRICKY)}
    spec = stage(cmds=["prog"], arguments=TRICKY, env=env).run_spec(3, "tok")
    assert spec.startswith("kc_g=3\n")
    script = (
        spec
        + 'kc_exec() { printf "[%s]" "$@"; }\nkc_stage_env\n'
        + "".join(f'printf "<%s>" "${name}"\n' for name in env)
        + "kc_stage_argv\n"
    )
    out = subprocess.run(["busybox", "sh", "-c", script], capture_output=True, check=True).stdout.decode()
    assert out == "".join(f"<{v}>" for v in TRICKY) + "".join(f"[{w}]" for w in ["prog", *TRICKY])


def test_a_chain_round_trips_through_a_json_safe_dict() -> None:
    spec = chain(
        stage("a", env={"K": "v"}, arguments=["--x"], resources={"requests": {"memory": "64Mi"}}),
        stage("b", image="acme/b:2", image_pull_policy="Always"),
        tolerations=[{"key": "k", "operator": "Exists"}],
        image_pull_secrets=["pull"],
        labels={"team": "data"},
        keep_pod=True,
        sizing="static",
    )
    data = spec.to_dict()
    assert json.loads(json.dumps(data)) == data  # lists, dicts and scalars only
    assert data["stages"][0]["cmds"] == ["python", "main.py"]
    assert ChainSpec.from_dict(data) == spec


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ([], "chain"),
        ({"name": "c", "namespace": "n", "stages": [], "colour": "red"}, "colour"),
        ({"name": "c", "namespace": "n", "stages": "a"}, "stages"),
        ({"name": "c", "namespace": "n", "stages": ["a"]}, "stages[0]"),
        (
            {"name": "c", "namespace": "n", "stages": [{"name": "a", "image": "b", "cmd": []}]},
            "stages[0].cmd",
        ),
        ({"name": "c", "namespace": "n", "stages": [{"name": "a"}]}, "stages[0].image"),
        ({"name": "c", "stages": []}, "namespace"),
    ],
)
def test_a_chain_dict_with_a_wrong_field_names_it(data, field: str) -> None:
    with pytest.raises(ChainConfigError) as err:
        ChainSpec.from_dict(data)
    assert err.value.field == field
