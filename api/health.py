"""GET /health."""

from api.operation import Reply, ok, operation
from api.schemas import Output, Success


class Health(Output):
    service: str
    version: str
    status: str


class HealthResource:
    @operation("Check the service and the key", scope="", responses={200: Success[Health]}, errors=(401,),
               tags=("health",))
    def on_get(self, req, resp) -> Reply:
        return ok({"service": "botyconnect_api", "version": "v1", "status": "ok"})


ROUTES = [("/health", HealthResource())]
