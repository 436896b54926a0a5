"""``manage.py vapid_keys``: a VAPID key pair for Web Push (RFC 8292).

Without options it prints a new pair: the private key for
MESSAGECENTER_VAPID_PRIVATE_KEY and the public key browsers subscribe with.
``--write`` puts a new private key in MESSAGECENTER_VAPID_KEY_FILE (``make
run`` does, for the embedded default) unless that file exists already: a key
that changes makes every browser's subscription useless.
"""

import os
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from messagecenter.webpush import public_key_of, vapid_key_generate


class Command(BaseCommand):
    help = "Generate a VAPID key pair for Web Push, or write one to MESSAGECENTER_VAPID_KEY_FILE once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--write",
            action="store_true",
            help="Write a new private key to MESSAGECENTER_VAPID_KEY_FILE unless the file exists.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["write"]:
            private = vapid_key_generate()
            self.stdout.write(f"MESSAGECENTER_VAPID_PRIVATE_KEY={private}")
            self.stdout.write(f"public key: {public_key_of(private)}")
            return
        path = Path(str(settings.MESSAGECENTER_VAPID_KEY_FILE))
        if path.is_file():
            private = path.read_text(encoding="ascii").strip()
            self.stdout.write(f"VAPID key kept: {path} (public key {public_key_of(private)})")
            return
        private = vapid_key_generate()
        # Only the owner reads it: it signs every push this server sends.
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="ascii") as handle:
            handle.write(private + "\n")
        self.stdout.write(f"VAPID key written: {path} (public key {public_key_of(private)})")
