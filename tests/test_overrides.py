"""--set PATH=VALUE: any study field for one run, checked like the file's own values."""

import pytest

from vpnlab.plan import overrides
from vpnlab.core.errors import StudyError
from vpnlab.plan.scenarios import make_plan
from vpnlab.core.schema import SOCKET_BUFFER_MAX, socket_buffer_limit
from vpnlab.plan.study import parse_study

STUDY = """\
name: o
vpns: [{driver: none}, {driver: openvpn, options: {cipher: AES-128-GCM}}]
links: [{rate_mbit: 100}]
workloads: [{kind: transfer, size: 32M}, {kind: tcp}]
"""


def test_a_set_changes_the_field_and_the_study_identity():
    text = overrides.apply(STUDY, ["workloads[0].size=715M", "links[0].rate_mbit=1000",
                                   "vpns[1].options.cipher=AES-256-GCM"])
    study = parse_study(text)
    assert study.workloads[0].size == 715 * 1024**2
    assert study.links[0].rate_mbit == 1000
    assert study.vpns[1].options.cipher == "AES-256-GCM"
    assert text.startswith("# --set workloads[0].size=715M\n")
    before = {s.id for s in make_plan(parse_study(STUDY)).scenarios}
    after = {s.id for s in make_plan(study).scenarios}
    assert before.isdisjoint(after)          # other conditions, other scenarios
    assert overrides.apply(STUDY, []) == STUDY


def test_a_list_value_is_a_sweep_and_a_bad_value_is_an_error_of_the_field():
    study = parse_study(overrides.apply(STUDY, ["workloads[1].window=[8K, 64K]"]))
    assert len(study.workloads) == 3
    with pytest.raises(StudyError, match=r"workloads\[0\]\.size"):
        parse_study(overrides.apply(STUDY, ["workloads[0].size=lots"]))


@pytest.mark.parametrize("assignment, message", [
    ("workloads[5].size=1M", r"no workloads\[5\]"),
    ("nothing.here=1", "no nothing"),
    ("workloads[0]size=1", "cannot read the path"),
    ("repetitions", "expected PATH=VALUE"),
    ("links[0].rate_mbit=[1, 2", "not valid YAML"),
])
def test_a_wrong_path_or_value_says_which(assignment, message):
    with pytest.raises(StudyError, match=message):
        overrides.apply(STUDY, [assignment])


@pytest.mark.skipif(not socket_buffer_limit() or socket_buffer_limit() + 1024 > SOCKET_BUFFER_MAX,
                    reason="this kernel's socket buffer limit is unreadable or above 64M")
def test_a_set_value_and_a_built_in_study_are_checked_against_this_machine_as_a_file_is(tmp_path):
    """A window above net.core.rmem_max is refused in a file; given by --set it was let through, and the
    kernel would have silently capped it (checked the same on --resume and for built-in studies)."""
    from vpnlab.cli.run import _the_study

    path = tmp_path / "study.yaml"
    path.write_text(STUDY)
    with pytest.raises(StudyError, match=r"workloads\[1\]\.window.*net\.core\.rmem_max"):
        _the_study(str(path), None, [f"workloads[1].window={socket_buffer_limit() + 1024}"])
    with pytest.raises(StudyError, match=r"workloads\[0\]\.window"):
        _the_study("narayan-2008", None, [f"workloads[0].window={socket_buffer_limit() + 1024}"])


def test_a_built_in_study_and_a_resumed_one_are_checked_against_this_machine(tmp_path, monkeypatch):
    """Not only through --set: a built-in study named on the command line, and the study a results
    directory stores (--resume), meet this kernel's socket buffer limit as a file does."""
    from vpnlab.plan import study as study_module
    from vpnlab.cli.run import stored_study, load_study_arg
    from vpnlab.store import Store
    from vpnlab.plan.study import builtin_studies

    store = Store.open_dir(tmp_path)
    store.start_run(version="t", kernel="k", hostname="h", capabilities={}, tool_versions={},
                    study_name="narayan-2008", study_text=builtin_studies()["narayan-2008"])
    store.close()
    monkeypatch.setattr(study_module, "socket_buffer_limit", lambda: 1 << 20)  # its 64 KB windows fit
    assert load_study_arg("narayan-2008")[0].name == stored_study(tmp_path)[0].name == "narayan-2008"
    monkeypatch.setattr(study_module, "socket_buffer_limit", lambda: 32 * 1024)  # they do not
    with pytest.raises(StudyError, match=r"window.*net\.core\.rmem_max"):
        load_study_arg("narayan-2008")
    with pytest.raises(StudyError, match=r"window.*net\.core\.rmem_max"):
        stored_study(tmp_path)
