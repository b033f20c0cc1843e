"""`python -m trnlab.course COMMAND ...` — tools for maintainers and instructors.

    execute [NOTEBOOK...]                 re-execute notebooks in place, keeping their outputs
    solve NOTEBOOK -o OUT [--wrong]       write a copy with the reference solutions inserted
    grade SUBMISSION... --out grades.csv  grade students' notebooks (CSV, JSON, feedback files)
    nbgrader-export COURSE_DIR            write an nbgrader course directory (source/, config)
    site [--out build/site]               build the executed course as an offline static website

`python -m trnlab.course COMMAND --help` describes each command's options.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    command, rest = argv[0], argv[1:]
    if command == "execute":
        from trnlab.course.execute import main as execute_main

        return execute_main(rest)
    if command == "solve":
        from trnlab.course.solve import main as solve_main

        return solve_main(rest)
    if command == "grade":
        from trnlab.course.grade import main as grade_main

        return grade_main(rest)
    if command == "nbgrader-export":
        from trnlab.course.nbgrader_export import main as export_main

        return export_main(rest)
    if command == "site":
        from trnlab.course.site import main as site_main

        return site_main(rest)
    print(f"unknown command {command!r}\n\n{__doc__.strip()}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
