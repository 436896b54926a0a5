"""REST adapters of the message centre (the ``/api/v1/`` contract, schema at
``/api/schema/``): one class per operation."""
