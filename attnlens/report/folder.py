"""A report folder and the object that stands for it in Python (``Report``).

The page is built from run.json and the tables alone (``run_folder`` reads them, ``html``
renders them), so ``Report(DIR).render()`` (``attnlens report DIR``) rebuilds it without the
model. The folder's layout: ``run_folder``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from attnlens.errors import DataError
from attnlens.report.run_folder import (  # re-exported: the folder's layout and records
    FIGURE_SUFFIXES,
    FIGURES_DIR,
    INDEX_FILE,
    RUN_FILE,
    TABLES_DIR,
    RunFolder,
    SectionRecord,
    Tables,
)

__all__ = [
    "FIGURES_DIR", "FIGURE_SUFFIXES", "INDEX_FILE", "RUN_FILE", "TABLES_DIR", "Report",
    "RunFolder", "SectionRecord", "Tables",
]


class Report(RunFolder):
    """A report folder: its run record, tables, findings and page.

    ``attnlens.analyze(...)`` returns one; ``Report(path)`` opens an existing folder. In a
    notebook it displays its summary and head map inline.
    """

    def render(self) -> Path:
        """(Re)build index.html from run.json, the tables and the figures."""
        from attnlens.report.html import write_report_page

        return write_report_page(self)

    def write(self, out_dir: str | Path) -> Report:
        """Copy this report (run.json, tables, figures) to ``out_dir`` and build its page."""
        out = Path(out_dir)
        if out.resolve() == self.path.resolve():
            return Report(out)
        if out.exists() and any(out.iterdir()):
            raise DataError(f"output folder {out} is not empty; choose another --out.")
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy2(self.path / RUN_FILE, out / RUN_FILE)
        (out / TABLES_DIR).mkdir(exist_ok=True)
        (out / FIGURES_DIR).mkdir(exist_ok=True)
        for name in self.tables:
            for suffix in (".csv", ".md"):
                source = self.tables_dir / f"{name}{suffix}"
                if source.is_file():
                    shutil.copy2(source, out / TABLES_DIR / source.name)
        for figure in self.figure_files():
            shutil.copy2(figure, out / FIGURES_DIR / figure.name)
        copy = Report(out)
        copy.render()
        return copy

    def _repr_html_(self) -> str:
        from attnlens.report.html import notebook_html

        return notebook_html(self)

    def __repr__(self) -> str:
        return f"Report({str(self.path)!r}: {len(self.tables)} tables)"
