"""The reports renamed: each .txt now .md with its content unchanged, the CSV left alone."""

from pathlib import Path

REPORTS = Path("reports")
CONTENTS = {"2024-01": "January: 41 tickets closed\n", "2024-02": "February: 37 tickets closed\n",
            "2024-03": "March: 52 tickets closed\n"}


def test_every_txt_is_now_md_with_its_content():
    for stem, text in CONTENTS.items():
        assert not (REPORTS / f"{stem}.txt").exists(), stem
        assert (REPORTS / f"{stem}.md").read_text() == text, stem


def test_the_other_files_are_left_alone():
    assert sorted(path.name for path in REPORTS.iterdir()) == ["2024-01.md", "2024-02.md", "2024-03.md", "index.csv"]
    assert (REPORTS / "index.csv").read_text().startswith("month,closed\n")
