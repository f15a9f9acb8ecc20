"""The operator library, written in the tensor-expression language."""
