-- wrk script: 16 pipelined `GET /` requests in one write (scripts/http_bench.sh).
--   wrk -t1 -c64 -d5s -s perf/http_pipeline.lua http://127.0.0.1:PORT/
init = function(args)
   local requests = {}
   for i = 1, 16 do
      requests[i] = wrk.format(nil, "/")
   end
   burst = table.concat(requests)
end

request = function()
   return burst
end
