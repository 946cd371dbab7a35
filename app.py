"""Workset's Chalice app: wiring only. Routes live in blueprints under chalicelib/; the sweep is
the scheduled function."""

import gc

gc.disable()  # importing builds only objects that live as long as the instance: collecting them is waste

from chalice import Chalice, Rate
from chalice.app import CloudWatchEvent, SQSEvent, SQSRecord

from chalicelib.agents import sweep
from chalicelib.api import bp as admin_api
from chalicelib.api.authorization import bp as oauth_endpoints
from chalicelib.base import log
from chalicelib.base.clock import utcnow
from chalicelib.base.config import settings
from chalicelib.console import bp as console
from chalicelib.mcp.routes import bp as mcp_endpoint
from chalicelib.net import notify
from chalicelib.store import queues

app = Chalice(app_name="workset")
app.register_blueprint(mcp_endpoint)
app.register_blueprint(admin_api)
app.register_blueprint(oauth_endpoints)
app.register_blueprint(console)
gc.freeze()  # what import built is never garbage; later collections need not scan it again
gc.enable()


@app.schedule(Rate(5, unit=Rate.MINUTES), name="sweep")
def scheduled_sweep(event: CloudWatchEvent) -> None:
    """The rule, every five minutes; a large sweep hands batches of agents to the workers. Its
    log line carries Lambda's request id."""
    with log.bound(log.invocation_id(event.context)):
        sweep.run(utcnow(), dispatch=sweep.queue_dispatch)


@app.on_sqs_message(queue=settings().webhook_queue, batch_size=10, name="webhook_consumer")
def webhook_consumer(event: SQSEvent) -> dict[str, list[dict[str, str]]]:
    """Signed webhook deliveries; failures are reported per message (partial batch response)."""
    with log.bound(log.invocation_id(event.context)):
        failed = notify.consume([_message(record) for record in event], event.context.get_remaining_time_in_millis)
    return {"batchItemFailures": [{"itemIdentifier": message_id} for message_id in failed]}


@app.on_sqs_message(queue=settings().sweep_queue, batch_size=1, name="sweep_worker")
def sweep_worker(event: SQSEvent) -> None:
    """One message of the work queue: a batch of a large sweep, or a run's end to record (a
    failure leaves the message for SQS to retry)."""
    with log.bound(log.invocation_id(event.context)):
        for record in event:
            sweep.handle_message(record.body, utcnow())


def _message(record: SQSRecord) -> queues.Message:
    fields = record.to_dict()
    count = fields.get("attributes", {}).get("ApproximateReceiveCount", "1")
    return queues.Message(fields["messageId"], record.body, record.receipt_handle,
                          int(count) if str(count).isdigit() else 1)
