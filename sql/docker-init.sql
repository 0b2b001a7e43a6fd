-- docker-compose: the perfwatch store lives beside Airflow's metadata DB in the same server.
CREATE USER perfwatch WITH PASSWORD 'perfwatch';
CREATE DATABASE perfwatch OWNER perfwatch;
