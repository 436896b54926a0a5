"""REST adapters of the message centre (API.md): one class per operation."""
