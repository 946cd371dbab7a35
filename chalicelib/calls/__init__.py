"""The call path: a tool call as a durable run (validation, approval, lease, dry run), the approval
policies that decide when a person is asked, the vendor request and its answer, and how a run ends."""
