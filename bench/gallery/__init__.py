"""The model gallery: real architectures exported by PyTorch, imported, checked and timed
(``python -m bench.gallery --help``)."""
