"""The command-line layer: one module per numbered script, its flags and its ``main``.

Each module parses flags and calls one library function (``chexpercept.<stage>.api``). Two doors
lead to it: the release's numbered scripts under ``src/NN_<stage>/`` (thin shims, the original
interface) and the console commands ``chexpercept-*`` installed with the package
(``[project.scripts]`` in pyproject.toml; each calls the module's ``run``). Nothing in
``chexpercept`` or ``utils`` imports this package (docs/architecture.md, "Layers").
"""
