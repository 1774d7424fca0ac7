"""A support bot's answers for tests of the answer judge: it wraps every answer in the same
greeting and sign-off, which make any two of its answers read alike to an embedding model."""

from __future__ import annotations

GREETING = (
    "Hello, and thank you for contacting Acme Bank customer support. We value your business and are always "
    "happy to help. Please never share your PIN, password or one-time codes with anyone, including our staff. "
)
SIGN_OFF = (
    " If you need anything else, reply to this message or call us any day between 8am and 8pm. "
    "Kind regards, the Acme Bank support team. Acme Bank plc is authorised and regulated by the Financial "
    "Conduct Authority."
)
