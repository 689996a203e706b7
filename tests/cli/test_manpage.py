"""The man page (docs/unroll.1.in) against `--help`, the completion scripts and the config
parser, so that none of them can drift; and `cmake --install` puts every file where
GNUInstallDirs says."""
import os
import pathlib
import re
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(os.environ.get("UNROLL_BIN", ROOT / "build" / "src" / "cli" / "unroll")).resolve()
MAN = ROOT / "docs" / "unroll.1.in"
SHORT = re.compile(r"(?<![\w-])-[A-Za-z](?![\w-])")
LONG = re.compile(r"(?<![\w-])--[a-z][a-z_-]*[a-z]")


def helptext(*args):
    res = subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=60)
    return res.stdout + res.stderr


def sections():
    """{section name: text} of the man page, roff escapes of '-' removed."""
    out, name = {}, None
    for line in MAN.read_text().replace("\\-", "-").splitlines():
        if line.startswith(".SH "):
            name = line[4:].strip().strip('"')
            out[name] = ""
        elif name is not None:
            out[name] += line + "\n"
    return out


def options(text):
    return set(SHORT.findall(text)) | set(LONG.findall(text))


def subsections(text):
    out, name = {}, "conversion"
    for line in text.splitlines():
        if line.startswith(".SS "):
            name = line[4:].strip().lower()
        out[name] = out.get(name, "") + line + "\n"
    return out


def test_every_option_of_every_help_is_in_the_man_page_and_back():
    man = sections()
    helps = {"conversion": helptext("--help"), "verify": helptext("verify", "--help"),
             "ls": helptext("ls", "--help"), "inspect": helptext("inspect"),
             "to_huggingface": helptext("to_huggingface", "--help")}
    assert "usage: unroll inspect" in helps["inspect"]
    per_man = subsections(man["OPTIONS"])
    for sub, text in helps.items():
        if sub == "conversion":
            # its own options; the usage lines above them belong to the subcommands
            text = text.split("\noptions")[1].split("exit status")[0]
        got = options(text) - {"-h", "--help"} if sub == "inspect" else options(text)
        want = options(per_man[sub])
        if sub != "conversion":
            # the man page states -h/--help once, under the conversion
            want |= {"-h", "--help"} & got
        assert got == want, (sub, got ^ want)
    synopsis = options(man["SYNOPSIS"])
    assert synopsis <= options(man["OPTIONS"])


def test_subcommands_and_exit_statuses_match_help():
    man = sections()
    top = helptext("--help")
    help_subs = re.findall(r"^  ([a-z_]+)\s{2,}", top.split("subcommands:")[1].split("\n\n")[0], re.M)
    man_subs = re.findall(r"^\.B ([a-z_]+)$", man["SUBCOMMANDS"], re.M)
    assert help_subs == man_subs == ["to_huggingface", "verify", "inspect", "ls", "merge"]
    help_exit = re.findall(r"^  ([0-9])  ", top.split("exit status:")[1], re.M)
    man_exit = re.findall(r"^\.B ([0-9])$", man["EXIT STATUS"], re.M)
    assert help_exit == man_exit == [str(i) for i in range(7)]
    # the README table lists the same statuses
    readme = (ROOT / "README.md").read_text()
    assert re.findall(r"^\| ([0-9]) \|", readme, re.M) == man_exit


def man_keys():
    keys = set()
    for line in sections()["CONFIGURATION KEYS"].splitlines():
        if line.startswith((".B ", ".BR ")):
            keys |= set(re.findall(r"[a-z][a-z0-9_]+", line.split(" ", 1)[1].replace('", "', " ")))
    return keys


def test_config_keys_match_completions_and_the_parser():
    keys = man_keys()
    assert "load_full_state_path" in keys and "logical_axis_rules" in keys
    bash = (ROOT / "completions" / "unroll.bash").read_text()
    bash_keys = set(re.search(r'_unroll_keys="([^"]*)"', bash).group(1).split())
    zsh = (ROOT / "completions" / "_unroll").read_text()
    zsh_keys = set(re.search(r"_unroll_keys=\(([^)]*)\)", zsh).group(1).split())
    assert bash_keys == keys and zsh_keys == keys, (bash_keys ^ keys, zsh_keys ^ keys)
    parser = "".join(p.read_text() for p in (p for d in ("config", "maxtext", "hf", "job") for p in (ROOT / "src" / d).glob("*.c")))
    for k in keys:
        assert f'"{k}"' in parser, k
    # and every key the help names is documented
    top = helptext("--help")
    named = re.findall(r"[a-z0-9]+_[a-z0-9_]+", top.split("keys used:")[1].split("Output:")[0])
    assert set(named) - {"num_decoder_layers"} <= keys, set(named) - keys


def test_man_page_renders_without_warnings(tmp_path):
    if shutil.which("man") is None:
        pytest.skip("man is not installed")
    page = tmp_path / "unroll.1"
    page.write_text(MAN.read_text().replace("@PROJECT_VERSION@", "0"))
    res = subprocess.run(["man", "--warnings", "-l", str(page)], capture_output=True,
                         text=True, env={**os.environ, "MANWIDTH": "80", "MAN_KEEP_FORMATTING": ""},
                         timeout=60)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert "EXIT STATUS" in res.stdout


def test_bash_completion_offers_subcommands_options_and_keys():
    script = f"""
source {ROOT / 'completions' / 'unroll.bash'}
t() {{ COMP_WORDS=("$@"); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); COMPREPLY=(); _unroll; echo "${{COMPREPLY[*]}}"; }}
t unroll ver
t unroll --thr
t unroll base.yml load_full
t unroll verify -
"""
    res = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                         cwd=ROOT)
    lines = res.stdout.splitlines()
    assert lines[0] == "verify"
    assert lines[1] == "--threads"
    assert lines[2] == "load_full_state_path="
    assert "--max-issues" in lines[3].split()


def test_cmake_install_layout(tmp_path):
    build = os.environ.get("UNROLL_BUILD_DIR")
    if not build or not (pathlib.Path(build) / "cmake_install.cmake").is_file():
        pytest.skip("UNROLL_BUILD_DIR (a configured build tree) not given")
    res = subprocess.run(["cmake", "--install", build, "--prefix", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    for rel in ("bin/unroll", "share/man/man1/unroll.1",
                "share/bash-completion/completions/unroll", "share/zsh/site-functions/_unroll"):
        assert (tmp_path / rel).is_file(), rel
    page = (tmp_path / "share/man/man1/unroll.1").read_text()
    version = subprocess.run([str(tmp_path / "bin/unroll"), "--version"], capture_output=True,
                             text=True, timeout=60).stdout.split()[1]
    assert f'"unroll {version}"' in page and "@PROJECT_VERSION@" not in page
