"""Cleaning a launch's artifacts of secrets while keeping its trace usable.

nsys writes environments into the report and its SQLite export (perfgate.system.secrets says whose), so
after every launch, successful or not, :func:`clean_artifacts` goes through the launch folder:

- ``.sqlite``: redacted in place and vacuumed, then byte-scanned (perfgate.capture.redaction.sqlite_export);
  withheld if a secret is still found.
- ``.nsys-rep``: masked in place and kept only when nsys re-exports it clean and the strings the
  trace is read by are unchanged; otherwise withheld, and the cleaned ``.sqlite`` stays
  (perfgate.capture.redaction.nsys_rep).
- text files (``workload.log``, ``command.txt``, JSON, ...): redacted in place.
- anything else (a ``.qdstrm`` the importer left) cannot be checked: withheld when it holds a
  known secret's bytes, or when it is a raw capture (``.qdstrm``).

Withholding replaces a file by ``<name>.withheld.txt`` saying why (perfgate.system.secrets.withhold).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from perfgate.capture.redaction.nsys_rep import clean_report, reexport_sqlite, found_in_report
from perfgate.system.secrets import WITHHELD_SUFFIX, file_contains, redact_text
from perfgate.capture.redaction.sqlite_export import clean_sqlite, needles, withhold_quietly

TEXT_SUFFIXES = frozenset({".txt", ".log", ".json", ".csv", ".md", ".xml", ".out", ".err"})
UNCHECKABLE_SUFFIXES = frozenset({".qdstrm"})


@dataclass
class Cleaning:
    """What :func:`clean_artifacts` did: files redacted in place, notes of withheld files."""

    redacted: list[Path] = field(default_factory=list)
    withheld: list[Path] = field(default_factory=list)

    def merge(self, other: Cleaning) -> Cleaning:
        self.redacted += other.redacted
        self.withheld += other.withheld
        return self


def clean_text_file(path: Path, known: Sequence[str]) -> bool:
    """Redact a text file in place; True when it changed."""
    try:
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
    except OSError:
        return False
    cleaned = redact_text(text, known)
    if cleaned == text:
        return False
    path.write_text(cleaned, encoding="utf-8", errors="surrogateescape")
    return True


def clean_artifacts(folder: Path, known: Sequence[str], nsys: Path | None = None) -> Cleaning:
    """Clean every file under ``folder`` (see the module docstring). ``known``: secret values of
    perfgate's own environment (perfgate.system.secrets.secret_values); ``nsys``: the nsys that exports
    a report to check it, and a report without a sibling export."""
    done = Cleaning()
    if not folder.is_dir():
        return done
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()
                   and not p.name.endswith(WITHHELD_SUFFIX))
    for report in [p for p in files if p.suffix == ".nsys-rep"]:
        export = report.with_suffix(".sqlite")
        if not export.is_file() and (nsys is None or not reexport_sqlite(report, export, nsys)):
            done.withheld.append(withhold_quietly(report, "it could not be exported to check it for secrets"))
            continue
        if export not in files:
            files.append(export)
    for path in sorted(set(files)):
        done.merge(_clean_file(path, known, nsys))
    return done


def _clean_file(path: Path, known: Sequence[str], nsys: Path | None) -> Cleaning:
    done = Cleaning()
    if not path.is_file():
        return done
    if path.suffix == ".sqlite":
        found, note = clean_sqlite(path, known)
        if note is not None:
            done.withheld.append(note)
        elif found:
            done.redacted.append(path)
        report = path.with_suffix(".nsys-rep")
        # the report holds strings its export does not (the workload's command line)
        in_report = found_in_report(report.read_bytes()) if report.is_file() else []
        if report.is_file() and (found or in_report or file_contains(report, needles((), known))):
            note = clean_report(report, [*found, *in_report], known, nsys)
            done.withheld.append(note) if note else done.redacted.append(report)
    elif path.suffix == ".nsys-rep":
        pass  # cleaned with its export
    elif path.suffix in TEXT_SUFFIXES:
        if clean_text_file(path, known):
            done.redacted.append(path)
    elif path.suffix in UNCHECKABLE_SUFFIXES:
        done.withheld.append(withhold_quietly(path, "a raw capture cannot be checked for secrets"))
    elif file_contains(path, needles((), known)):
        done.withheld.append(withhold_quietly(path, "it contains the value of a secret environment variable"))
    return done


__all__ = ["Cleaning", "clean_artifacts", "clean_text_file"]
