"""The app layer: the `specdec` command line (`cli`, with its checks `cli_checks` and `cli_eagle`), the
evaluation harness behind `specdec demo` and `specdec bench` (`evaluation` over `harness`), the registry of
named methods (`methods`) and the model loaders (`models`), all built over the library (`specdec`), which
never imports from here. The one file outside that does is `specdec/__main__.py`, the entry point of
`python -m specdec`, which no module imports."""
