"""Names only a framework reads, which vulture cannot see used (`make deadcode`; pyproject's [tool.vulture])."""

from vulture.whitelists.whitelist_utils import Whitelist

# Each line: a name, where it is, and who reads it. Lambda's `lambda_handler`, pydantic's `model_config` and its
# validators are left out by [tool.vulture] itself; anything else here is a framework's, never the tests'.
_ = Whitelist()

# pydantic fields of wire models (extra="forbid" bodies must declare them): read by validation and model_dump.
_.schema_version  # contracts/callback.py, contracts/messages.py: every body and message says its version
_.test_results  # contracts/callback.py: a report's counts, kept in the stored callback payload
_.artifact_url  # contracts/callback.py: likewise
_.scheduled  # contracts/callback.py: ScheduledBody's discriminator (`scheduled: true`)
_.iat  # domain/ticket.py: TicketClaims, the ticket's issued-at claim as PyJWT writes and checks it
_._to_wire  # contracts/check_messages.py: CheckMessage's model_serializer, called by pydantic's model_dump

# Read by name rather than as an attribute.
_.__getattr__  # composition/__init__.py: Python's module attribute hook (PEP 562), `crcr.composition.<builder>`
_.COMPLETED  # domain/jobs.py: JobState("completed"), the state a stored job carries
_.webhook_secret  # settings.py: Settings.secret("webhook_secret") and the secret document's keys
_.ticket_signing_key  # settings.py: likewise
_.hud_token  # settings.py: likewise
_.endpoint  # composition/base.py: functools.cache's key (a client per AWS endpoint; crcr local's changes per stack)

# The AWS Lambda context object, as Powertools reads it (crcr local's stand-in for it).
_.memory_limit_in_mb  # local/stack.py: Context
_.invoked_function_arn  # local/stack.py: Context
_.aws_request_id  # local/stack.py: Context
_.get_remaining_time_in_millis  # local/stack.py: Context

# The standard library's HTTP server and socket server call these overrides (crcr local's front end).
_.readable  # local/front.py: io.RawIOBase, the request body's stream
_.readinto  # local/front.py: likewise
_.protocol_version  # local/front.py: BaseHTTPRequestHandler
_.setup  # local/front.py: BaseHTTPRequestHandler
_.log_message  # local/front.py: BaseHTTPRequestHandler
_.handle_one_request  # local/front.py: BaseHTTPRequestHandler
_.close_connection  # local/front.py: BaseHTTPRequestHandler
_.requestline  # local/front.py: BaseHTTPRequestHandler
_.raw_requestline  # local/front.py: BaseHTTPRequestHandler
_.handle_expect_100  # local/front.py: BaseHTTPRequestHandler
_.explain  # local/front.py: BaseHTTPRequestHandler.send_error's signature
_.request_queue_size  # local/front.py: socketserver.TCPServer
_.get_request  # local/front.py: socketserver.TCPServer
_.process_request  # local/front.py: socketserver.TCPServer
_._server_entry  # local/aws.py: moto's ThreadedMotoServer
_.__class__  # local/logs.py: Python's object model (a formatter given a class of its own)
