build-san/proxy/server.o: proxy/server.c proxy/server.h protocol/resp.h \
 proxy/config.h proxy/client.h proxy/upstream.h proxy/listener.h \
 proxy/log.h
proxy/server.h:
protocol/resp.h:
proxy/config.h:
proxy/client.h:
proxy/upstream.h:
proxy/listener.h:
proxy/log.h:
