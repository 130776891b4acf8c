# Mosquitto from Debian, for Docker/compose.mqtt.yaml: the broker the gateways of a house meet on.
# Anonymous, on 1883; for a network, add a password file and ACLs (who may publish on
# gattway/+/command may use every device).
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends mosquitto \
 && rm -rf /var/lib/apt/lists/* \
 && printf 'listener 1883\nallow_anonymous true\npersistence false\nlog_dest stdout\n' > /etc/mosquitto/house.conf
USER mosquitto
EXPOSE 1883
CMD ["mosquitto", "-c", "/etc/mosquitto/house.conf"]
