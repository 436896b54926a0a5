"""The incumbent (django-notifications-hq on Django 4.2), measured in its own
virtual environment; see run.py."""
